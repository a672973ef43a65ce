//! Every rule of the rule table (`launchgate::rules::RULES`) is triggered once through the real
//! HTTPS server, and `launchgate_violations_total` counts it under its own id — and under no
//! other. The test iterates the table: a rule without a case here, or a case whose rule left the
//! table, fails it.

mod common;

use common::{TestServer, options};
use launchgate::rules::RULES;
use launchgate::server::{ServeOptions, start};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const CONFIG: &str = r#"
match:
  launchLabels: [wandb.ai/monitor]
  queueLabels: [launchgate.io/queue]
queues:
  namespaces:
    limits: {allowedNamespaces: [ml]}
  variables:
    limits:
      template: |
        apiVersion: batch/v1
        kind: Job
        spec:
          template:
            spec:
              containers:
                - name: train
                  resources:
                    limits:
                      nvidia.com/gpu: "{{gpus}}"
      variables:
        gpus: {type: integer, minimum: 0, maximum: 4}
  fields:
    limits:
      fields:
        - {path: "containers[*].resources.limits.cpu", type: quantity, maximum: "4"}
  strict:
    limits:
      strict: true
      template: |
        apiVersion: batch/v1
        kind: Job
        spec:
          backoffLimit: 0
  totals:
    limits:
      totals:
        nvidia.com/gpu: {maximum: 8}
  deadline:
    limits: {maxActiveDeadlineSeconds: 3600}
  registries:
    limits: {allowedRegistries: [ghcr.io/acme]}
  kueue:
    kueue: {localQueue: team-a}
  gang:
    pytorch: {enabled: false}
    guardrails: {gang: deny}
  cost:
    guardrails:
      costCeiling: {maxGpuHours: 1}
  pytorch:
    pytorch: {enabled: true, onUnwirable: deny}
  plain: {}
"#;

/// An AdmissionReview of `operation` on `object` (a `resource` of `group/version`).
fn review(resource: (&str, &str, &str), object: Value, namespace: &str) -> Value {
    let (group, version, plural) = resource;
    let kind = object["kind"].clone();
    let uid = format!(
        "uid-{}",
        object["metadata"]["name"].as_str().unwrap_or("scale")
    );
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": plural},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "alice@example.com"},
            "object": object,
            "oldObject": null,
            "dryRun": false,
        }
    })
}

fn labels(queue: &str) -> Value {
    json!({"wandb.ai/monitor": "true", "launchgate.io/queue": queue})
}

/// A batch/v1 Job of `queue`, with one container `train` carrying `container`.
fn job(queue: &str, name: &str, spec: Value, container: Value) -> Value {
    let mut c = json!({"name": "train", "image": "ghcr.io/acme/train:1"});
    for (k, v) in container.as_object().unwrap() {
        c[k] = v.clone();
    }
    let mut object = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": labels(queue)},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [c]}}},
    });
    for (k, v) in spec.as_object().unwrap() {
        object["spec"][k] = v.clone();
    }
    review(("batch", "v1", "jobs"), object, "ml")
}

/// No fields.
fn none() -> Value {
    json!({})
}

fn gpus(n: i64) -> Value {
    json!({"resources": {"limits": {"nvidia.com/gpu": n}}})
}

/// The request that triggers `rule`, the endpoint it goes to, and its body.
fn trigger(rule: &str) -> Option<(&'static str, Value)> {
    Some(match rule {
        "limits.allowedNamespaces" => {
            let mut r = job("namespaces", "ns", none(), none());
            r["request"]["namespace"] = json!("elsewhere");
            r["request"]["object"]["metadata"]["namespace"] = json!("elsewhere");
            ("/validate", r)
        }
        "limits.variables" => ("/validate", job("variables", "vars", none(), gpus(8))),
        "limits.fields" => (
            "/validate",
            job(
                "fields",
                "fields",
                none(),
                json!({"resources": {"limits": {"cpu": "8"}}}),
            ),
        ),
        "limits.strict" => (
            "/validate",
            job("strict", "strict", json!({"backoffLimit": 3}), none()),
        ),
        "limits.totals" => (
            "/validate",
            job(
                "totals",
                "totals",
                json!({"parallelism": 4, "completions": 4}),
                gpus(4),
            ),
        ),
        "limits.maxActiveDeadlineSeconds" => {
            ("/validate", job("deadline", "deadline", none(), none()))
        }
        "accelerators.uncounted" => {
            // Its GPUs come through a claim template the server (no cluster lookups) cannot
            // read, in a queue whose totals bound GPUs.
            let mut r = job(
                "totals",
                "claims",
                none(),
                json!({"resources": {"claims": [{"name": "gpus"}]}}),
            );
            r["request"]["object"]["spec"]["template"]["spec"]["resourceClaims"] =
                json!([{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]);
            ("/validate", r)
        }
        "limits.allowedRegistries" => (
            "/validate",
            job(
                "registries",
                "registries",
                none(),
                json!({"image": "evil.example/train:1"}),
            ),
        ),
        "limits.unverifiableRuntime" => {
            // Its size is left to a runtime the server (no cluster lookups) cannot read, in a
            // queue whose totals bound sizes.
            let trainjob = json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "runtime", "namespace": "ml", "labels": labels("totals")},
                "spec": {
                    "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
                    "trainer": {"image": "ghcr.io/acme/train:1"},
                },
            });
            (
                "/validate",
                review(
                    ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
                    trainjob,
                    "ml",
                ),
            )
        }
        "limits.trainingRuntimes" => {
            // A namespaced runtime, sized on the TrainJob itself, in a queue whose totals bound
            // sizes (trainingRuntimes: clusterOnly, the default).
            let trainjob = json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "own-runtime", "namespace": "ml", "labels": labels("totals")},
                "spec": {
                    "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": "mine"},
                    "trainer": {"image": "ghcr.io/acme/train:1", "numNodes": 1,
                                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}},
                },
            });
            (
                "/validate",
                review(
                    ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
                    trainjob,
                    "ml",
                ),
            )
        }
        "visibleDevices.tenantValue" => (
            "/validate",
            job(
                "plain",
                "visible",
                none(),
                json!({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}),
            ),
        ),
        "kueue.labels" => {
            let mut r = job("kueue", "kueue", none(), none());
            r["request"]["object"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] =
                json!("team-b");
            ("/validate", r)
        }
        "guardrails.gang" => {
            let replica = |n: i64| {
                json!({"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": {
                    "containers": [{"name": "pytorch", "image": "ghcr.io/acme/train:1"}]}}})
            };
            let pytorchjob = json!({
                "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": "gang", "namespace": "ml", "labels": labels("gang")},
                "spec": {
                    "runPolicy": {"schedulingPolicy": {"minAvailable": 2}},
                    "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)},
                },
            });
            (
                "/validate",
                review(("kubeflow.org", "v1", "pytorchjobs"), pytorchjob, "ml"),
            )
        }
        "guardrails.costCeiling" => (
            "/validate",
            job(
                "cost",
                "cost",
                json!({"activeDeadlineSeconds": 7200}),
                gpus(4),
            ),
        ),
        "pytorch.onUnwirable" => {
            // Two master tasks: the job can never rendezvous.
            let task = |name: &str| {
                json!({"name": name, "replicas": 2, "template": {"spec": {
                    "containers": [{"name": "train", "image": "ghcr.io/acme/train:1"}]}}})
            };
            let vcjob = json!({
                "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": "unwirable", "namespace": "ml", "labels": labels("pytorch")},
                "spec": {"plugins": {"pytorch": []}, "tasks": [task("master"), task("worker")]},
            });
            (
                "/validate",
                review(("batch.volcano.sh", "v1alpha1", "jobs"), vcjob, "ml"),
            )
        }
        "exemptions.unearnedMark" => {
            let mut r = job("plain", "marked", none(), none());
            r["request"]["object"]["metadata"]["annotations"] =
                json!({"launchgate.io/exempted-by": "wandb-image-builds"});
            ("/validate", r)
        }
        "scale.unreadableOwner" => {
            // A scale-up of a PyTorchJob the server's cache lists the namespace of and has not
            // seen yet (`ListsWorkloads`).
            let scale = |n: i64| {
                json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "scaled", "namespace": "ml"}, "spec": {"replicas": n}})
            };
            let mut r = review(("kubeflow.org", "v1", "pytorchjobs"), scale(4), "ml");
            let request = &mut r["request"];
            request["kind"] = json!({"group": "autoscaling", "version": "v1", "kind": "Scale"});
            request["subResource"] = json!("scale");
            request["name"] = json!("scaled");
            request["operation"] = json!("UPDATE");
            request["oldObject"] = scale(1);
            ("/validate", r)
        }
        "owner.intermediate" => {
            // A tenant's StatefulSet whose pods would pass as a LeaderWorkerSet's.
            let sts = json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "forged", "namespace": "ml"},
                "spec": {"replicas": 8, "template": {
                    "metadata": {"labels": {"leaderworkerset.sigs.k8s.io/name": "serve"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
            });
            (
                "/validate",
                review(("apps", "v1", "statefulsets"), sts, "ml"),
            )
        }
        "launchQueue.invalid" => {
            let lq = json!({
                "apiVersion": "launchgate.io/v1alpha1", "kind": "LaunchQueue",
                "metadata": {"name": "lq-small"},
                "spec": {"limits": {"enforcement": "sometimes"}},
            });
            let mut r = review(("launchgate.io", "v1alpha1", "launchqueues"), lq, "");
            r["request"]["namespace"] = Value::Null;
            ("/validate", r)
        }
        "server.tooDense" => {
            // Far more containers than the server's small memory budget could ever review.
            let containers: Vec<Value> = (0..20_000)
                .map(|i| json!({"name": format!("c{i}"), "image": "busybox"}))
                .collect();
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "dense", "namespace": "ml", "labels": labels("plain")},
                "spec": {"containers": containers},
            });
            ("/validate", review(("", "v1", "pods"), pod, "ml"))
        }
        "server.tooSlow" => {
            // Within the memory budget, but more containers than the server's short request
            // deadline leaves time to review.
            let containers: Vec<Value> = (0..800)
                .map(|i| json!({"name": format!("c{i}"), "image": "busybox"}))
                .collect();
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "wide", "namespace": "ml", "labels": labels("plain")},
                "spec": {"containers": containers},
            });
            ("/mutate", review(("", "v1", "pods"), pod, "ml"))
        }
        _ => return None,
    })
}

/// A cluster view that has listed every workload and holds none, offline otherwise (as a
/// server without one): the PyTorchJob a Scale names was created a moment ago.
struct ListsWorkloads;

impl launchgate::cluster::ClusterView for ListsWorkloads {
    fn lists_workloads(&self, _kind: launchgate::WorkloadKind, _namespace: &str) -> bool {
        true
    }
    fn is_connected(&self) -> bool {
        false
    }
}

/// `launchgate_violations_total` summed by rule.
fn violations_by_rule(metrics: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("launchgate_violations_total{") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once("} ").unwrap();
        let rule = labels
            .split(',')
            .find_map(|l| l.strip_prefix("rule=\""))
            .unwrap()
            .trim_end_matches('"');
        *out.entry(rule.to_string()).or_default() += value.trim().parse::<u64>().unwrap();
    }
    out
}

#[tokio::test]
async fn every_rule_of_the_table_is_counted_under_its_own_id() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let opts = ServeOptions {
        config: Some(config),
        // Small enough that a Pod of 20,000 containers can never fit, ample for the others.
        memory_budget: Some(16 << 20),
        // Short enough that a Pod of 800 containers takes longer than the half of it a review
        // may (the others are small bodies, never estimated); the deadline bounds only waits,
        // which sequential requests do not have.
        request_deadline: std::time::Duration::from_millis(200),
        ..options(dir.path())
    };
    let srv = TestServer::new(
        start(opts, Some(std::sync::Arc::new(ListsWorkloads)))
            .await
            .expect("server starts"),
        dir,
    );

    let mut missing = Vec::new();
    for rule in RULES {
        let Some((path, body)) = trigger(rule.id) else {
            missing.push(rule.id);
            continue;
        };
        let before = violations_by_rule(&srv.metrics().await);
        let answer = srv
            .post_json(path, serde_json::to_vec(&body).unwrap())
            .await;
        assert_eq!(
            answer["response"]["allowed"], false,
            "{}: not denied: {answer}",
            rule.id
        );
        let after = violations_by_rule(&srv.metrics().await);
        let counted =
            |id: &str| after.get(id).copied().unwrap_or(0) - before.get(id).copied().unwrap_or(0);
        assert!(
            counted(rule.id) >= 1,
            "{}: not counted under its id: {after:?}\n{answer}",
            rule.id
        );
        let others: Vec<&String> = after
            .keys()
            .filter(|id| *id != rule.id && counted(id) > 0)
            .collect();
        assert!(
            others.is_empty(),
            "{}: also counted as {others:?}\n{answer}",
            rule.id
        );
    }
    assert!(
        missing.is_empty(),
        "rules with no trigger here: {missing:?}"
    );

    // Nothing is counted under an id the table does not have (the table and the checks agree).
    let counted = violations_by_rule(&srv.metrics().await);
    let table: Vec<&str> = RULES.iter().map(|r| r.id).collect();
    let ids: Vec<&str> = counted.keys().map(String::as_str).collect();
    assert_eq!(ids.len(), table.len(), "{ids:?} vs {table:?}");
    for id in ids {
        assert!(table.contains(&id), "{id} is not in the table");
    }
    srv.server.begin_shutdown();
    srv.server.wait().await.unwrap();
}

#[test]
fn every_trigger_is_for_a_rule_of_the_table() {
    // A trigger left behind by a rule that was removed or renamed is a drift too.
    let known = [
        "limits.allowedNamespaces",
        "limits.variables",
        "limits.fields",
        "limits.strict",
        "limits.totals",
        "limits.maxActiveDeadlineSeconds",
        "limits.allowedRegistries",
        "accelerators.uncounted",
        "limits.unverifiableRuntime",
        "limits.trainingRuntimes",
        "kueue.labels",
        "visibleDevices.tenantValue",
        "guardrails.gang",
        "guardrails.costCeiling",
        "pytorch.onUnwirable",
        "exemptions.unearnedMark",
        "scale.unreadableOwner",
        "owner.intermediate",
        "launchQueue.invalid",
        "server.tooDense",
        "server.tooSlow",
    ];
    for id in known {
        assert!(trigger(id).is_some(), "{id}");
        assert!(
            launchgate::rules::by_id(id).is_some(),
            "{id} left the table"
        );
    }
    assert_eq!(known.len(), RULES.len());
}

/// The rule table as the troubleshooting page lists it: one line per rule, its id linking its
/// section of the rules reference (config key, what to do, UPDATE, native form), and what it
/// means.
fn rules_section() -> String {
    let mut out = String::new();
    for r in RULES {
        out.push_str(&format!(
            "- [`{}`](reference/rules.md#{}) — {}\n",
            r.id,
            r.id.replace('.', "-"),
            r.meaning
        ));
    }
    out
}

/// docs/troubleshooting.md lists the rule table as it is (`UPDATE_DOCS=1` rewrites the list).
#[test]
fn the_troubleshooting_page_lists_the_rule_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/troubleshooting.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let (head, rest) = page
        .split_once("<!-- rules:begin -->\n")
        .expect("rules:begin");
    let (listed, tail) = rest.split_once("<!-- rules:end -->").expect("rules:end");
    let table = rules_section();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(
            &path,
            format!("{head}<!-- rules:begin -->\n{table}<!-- rules:end -->{tail}"),
        )
        .unwrap();
        return;
    }
    assert_eq!(
        listed, table,
        "docs/troubleshooting.md: run UPDATE_DOCS=1 cargo test --test rules"
    );
}
