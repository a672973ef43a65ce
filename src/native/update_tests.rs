//! An UPDATE is judged by the compiled policies as the webhook judges it: one that brings a
//! workload into a queue (it was no launch workload, or another queue's) is a CREATE there too,
//! by every rule the native policies carry; one of a workload already in the queue is left to
//! the webhook, as the report says.
//!
//! Each case is one UPDATE, judged twice: by the webhook running the policy the native objects
//! implement (`as_native`: mutate, apply the patch, validate, as the API server does), and by
//! the compiled objects of the queue evaluated with the crate's CEL evaluator (the mutating
//! policy's match and patch, then the validating policy's match, its own `child` and
//! `entersQueue` variables and its validations). The limits' violations are the one part not
//! evaluated here (quantities are beyond the evaluator): the validating policy is given those
//! the webhook finds on a CREATE of the same object, which the e2e differential suites hold
//! the compiled limits equal to on the real API server.

use super::eval::{V, eval};
use super::webhooks::{Settings, configurations};
use super::{Options, QUEUE_KEY_ANNOTATION, as_native, compile};
use crate::admission::{AdmissionRequest, Operation};
use crate::cluster::NoCluster;
use crate::policy::{EXEMPTED_BY_ANNOTATION, Policy};
use crate::review::{Endpoint, decide};
use crate::rules;
use serde_json::{Value, json};

/// A queue with a 4-GPU cap per container, 16 GPUs in all and a Kueue LocalQueue (where
/// UPDATEs matter), a queue without limits, the platform group exempt everywhere; `research`
/// defaults to `cpu`, `team-b` to `gpu`.
const CONFIG: &str = r#"
match:
  exemptions:
    - name: platform
      groups: [platform-admins]
defaultQueue: cpu
namespaceQueues: {team-b: gpu}
queues:
  gpu:
    kueue: {localQueue: team-a}
    limits:
      variables:
        gpus: {type: integer, minimum: 0, maximum: 4}
      template:
        spec:
          template:
            spec:
              containers:
                - resources:
                    limits: {nvidia.com/gpu: "{{gpus}}"}
      totals:
        nvidia.com/gpu: {maximum: 16}
  cpu: {}
"#;

const TENANT: &str = "alice";
const KUEUE: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";

/// A suspended Job of `pods` pods of `gpus` GPUs each, with `labels`.
fn job(labels: Value, pods: i64, gpus: i64) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "labels": labels},
        "spec": {"suspend": true, "parallelism": pods, "completions": pods,
            "template": {"metadata": {}, "spec": {"restartPolicy": "Never",
                "containers": [{"name": "t", "image": "acme/t:1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}})
}

/// The labels of a launch workload of `queue` (as the tenant writes them, and with the queue's
/// Kueue label where it has one, as a workload admitted there carries it).
fn launch(queue: &str) -> Value {
    let mut labels = json!({"wandb.ai/monitor": "true", "launchgate.io/queue": queue});
    if queue == "gpu" {
        labels["kueue.x-k8s.io/queue-name"] = json!("team-a");
    }
    labels
}

/// One UPDATE.
struct Case {
    what: &'static str,
    namespace: &'static str,
    user: &'static str,
    groups: &'static [&'static str],
    old: Value,
    new: Value,
}

fn case(what: &'static str, old: Value, new: Value) -> Case {
    Case {
        what,
        namespace: "research",
        user: TENANT,
        groups: &[],
        old,
        new,
    }
}

fn request(case: &Case, operation: Operation) -> AdmissionRequest {
    let mut request = AdmissionRequest::synthetic_create(case.new.clone(), Some(case.namespace))
        .expect("a request");
    if operation == Operation::Update {
        request.operation = Operation::Update;
        request.old_object = Some(case.old.clone());
    }
    let mut groups = vec!["system:authenticated"];
    groups.extend(case.groups);
    request.user_info = Some(json!({"username": case.user, "groups": groups}));
    request
}

/// The webhook's answer, as the API server gets it: mutated, then validated. The object stored
/// when it is allowed.
fn by_webhook(policy: &Policy, case: &Case) -> Result<Value, String> {
    let mut request = request(case, Operation::Update);
    let mutation = decide(policy, Endpoint::Mutate, &request, &NoCluster);
    let mut object = case.new.clone();
    json_patch::patch(&mut object, &mutation.patch).map_err(|e| e.to_string())?;
    request.object = Some(object.clone());
    let validation = decide(policy, Endpoint::Validate, &request, &NoCluster);
    match validation.response.status {
        Some(status) if !validation.response.allowed => Err(status.message),
        _ => Ok(object),
    }
}

/// The CEL request of `case` as the API server binds it.
fn cel_request(case: &Case) -> V {
    let request = request(case, Operation::Update);
    V::from_json(&json!({
        "operation": "UPDATE",
        "namespace": case.namespace,
        "kind": {"group": request.kind.group, "version": request.kind.version,
            "kind": request.kind.kind},
        "userInfo": request.user_info,
    }))
}

/// True when every one of `conditions` (a compiled object's `matchConditions`) holds.
fn matches(conditions: &Value, vars: &[(&str, V)]) -> bool {
    conditions
        .as_array()
        .expect("match conditions")
        .iter()
        .all(|c| {
            let expression = c["expression"].as_str().unwrap();
            eval(expression, vars) == Ok(V::Bool(true))
        })
}

/// The value of the variable `name` of `policy` for the request.
fn variable(policy: &Value, name: &str, vars: &[(&str, V)]) -> V {
    let expression = policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no variable {name}"))["expression"]
        .as_str()
        .unwrap();
    eval(expression, vars).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The compiled objects' answer: the mutating policy's patch (when it matches the UPDATE),
/// then the validating policy's validations. The object stored when it is allowed.
fn by_native(
    compiled: &[Value],
    subset: &Policy,
    queue: &str,
    case: &Case,
) -> Result<Value, String> {
    let of = |kind: &str| {
        compiled.iter().find(|o| {
            o["kind"] == kind && o["metadata"]["annotations"][QUEUE_KEY_ANNOTATION] == queue
        })
    };
    let updates = |policy: &Value| {
        policy["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| {
                r["operations"]
                    .as_array()
                    .unwrap()
                    .contains(&json!("UPDATE"))
            })
    };
    let request = cel_request(case);
    let mut object = case.new.clone();
    let mutate = of("MutatingAdmissionPolicy").expect("every queue's mutating policy");
    let bound = |object: &Value| {
        vec![
            ("object", V::from_json(object)),
            ("oldObject", V::from_json(&case.old)),
            ("request", request.clone()),
        ]
    };
    if updates(mutate) && matches(&mutate["spec"]["matchConditions"], &bound(&object)) {
        let mut vars = bound(&object);
        let named: Vec<(V, V)> = ["child", "entersQueue"]
            .iter()
            .map(|n| (V::Str(n.to_string()), variable(mutate, n, &vars)))
            .collect();
        vars.push(("variables", V::Map(named)));
        let expression = mutate["spec"]["mutations"][0]["jsonPatch"]["expression"]
            .as_str()
            .unwrap();
        let ops = eval(expression, &vars).map_err(|e| format!("the mutation: {e}"))?;
        let patch: json_patch::Patch = serde_json::from_value(ops.into_json()).unwrap();
        json_patch::patch(&mut object, &patch).map_err(|e| e.to_string())?;
    }
    // A queue with nothing to check has no validating policy.
    let vars = bound(&object);
    let Some(validate) = of("ValidatingAdmissionPolicy") else {
        return Ok(object);
    };
    if !(updates(validate) && matches(&validate["spec"]["matchConditions"], &vars)) {
        return Ok(object);
    }
    // What the limits find: the webhook's violations on a CREATE of this object, but for the
    // exemption mark, which the policy checks itself.
    let mut created = request_for(case, &object);
    created.operation = Operation::Create;
    let found: Vec<V> = decide(subset, Endpoint::Validate, &created, &NoCluster)
        .summary
        .violations
        .iter()
        .filter(|v| v.rule != rules::EXEMPTIONS_UNEARNED_MARK)
        .map(|v| V::Str(v.message.clone()))
        .collect();
    let mut named: Vec<(V, V)> = ["child", "entersQueue"]
        .iter()
        .map(|n| (V::Str(n.to_string()), variable(validate, n, &vars)))
        .collect();
    named.push((V::Str("violations".into()), V::List(found.clone())));
    let mut vars = vars;
    vars.push(("variables", V::Map(named)));
    for v in validate["spec"]["validations"].as_array().unwrap() {
        let holds = eval(v["expression"].as_str().unwrap(), &vars)
            .map_err(|e| format!("a validation: {e}"))?;
        if holds != V::Bool(true) {
            let message = v["message"].as_str().map_or_else(
                || {
                    found
                        .iter()
                        .map(|f| format!("{f:?}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                },
                str::to_string,
            );
            return Err(message);
        }
    }
    Ok(object)
}

/// True when the validating webhook `serve --register-webhooks` registers for `policy` (split
/// by the queue's failure policy) is sent the UPDATE: what keeps a queue's webhook-only rules
/// judged in `hybrid` mode.
fn sent_to_the_webhook(policy: &Policy, case: &Case) -> bool {
    let vars = [
        ("object", V::from_json(&case.new)),
        ("oldObject", V::from_json(&case.old)),
        ("request", cel_request(case)),
    ];
    configurations(policy, &Settings::default())
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "ValidatingWebhookConfiguration")
        .flat_map(|c| c["webhooks"].as_array().unwrap().clone())
        // Not the Scale webhook: it is sent Scales only.
        .filter(|h| {
            h["rules"].as_array().unwrap().iter().any(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| !x.as_str().unwrap().ends_with("/scale"))
            })
        })
        .any(|h| matches(&h["matchConditions"], &vars))
}

/// A CREATE request of `object` from the case's requester.
fn request_for(case: &Case, object: &Value) -> AdmissionRequest {
    let mut request = request(case, Operation::Create);
    request.object = Some(object.clone());
    request
}

#[test]
fn an_update_that_brings_a_workload_into_a_queue_is_judged_as_a_create_natively_too() {
    let policy = Policy::from_yaml(CONFIG).unwrap();
    let subset = as_native(&policy).unwrap();
    let compiled = compile(&policy, &Options::default()).objects;
    let wide = |labels: Value| job(labels, 16, 4);
    let mark = |mut j: Value| {
        j["metadata"]["annotations"] = json!({EXEMPTED_BY_ANNOTATION: "platform"});
        j
    };
    let mut unsuspended = wide(launch("gpu"));
    unsuspended["spec"]["suspend"] = json!(false);
    let mut noted = wide(launch("gpu"));
    noted["metadata"]["labels"]["note"] = json!("x");
    let mut on_template = wide(json!({}));
    on_template["spec"]["template"]["metadata"]["labels"] = launch("gpu");
    let mut image = mark(job(launch("gpu"), 1, 8));
    image["spec"]["template"]["spec"]["containers"][0]["image"] = json!("acme/other:1");
    let pod = |labels: Value| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels},
            "spec": {"containers": [{"name": "t", "image": "acme/t:1",
                "resources": {"limits": {"nvidia.com/gpu": 8}}}]}})
    };
    // (the case, whether the webhook admits it)
    let cases = [
        (
            case(
                "a 16 × 4-GPU Job created outside any queue, labelled into one with totals 16",
                wide(json!({})),
                wide(launch("gpu")),
            ),
            false,
        ),
        (
            case(
                "the same Job moved from another queue",
                wide(launch("cpu")),
                wide(launch("gpu")),
            ),
            false,
        ),
        (
            case(
                "the same Job whose queue label was empty: the namespace's default queue, another one",
                wide(json!({"wandb.ai/monitor": "true", "launchgate.io/queue": ""})),
                wide(launch("gpu")),
            ),
            false,
        ),
        (
            case(
                "the same Job, not a launch workload before (another team's label)",
                wide(json!({"app": "web"})),
                wide(launch("gpu")),
            ),
            false,
        ),
        (
            case(
                "the same Job labelled into the queue on its pod template only",
                wide(json!({})),
                on_template,
            ),
            false,
        ),
        (
            case(
                "a Job over the per-container cap labelled into the queue",
                job(json!({}), 1, 8),
                job(launch("gpu"), 1, 8),
            ),
            false,
        ),
        (
            case(
                "a bare Pod over the cap labelled into the queue",
                pod(json!({})),
                pod(json!({"launchgate.io/queue": "gpu"})),
            ),
            false,
        ),
        (
            case(
                "a Job within the limits labelled into the queue, without its Kueue label",
                job(json!({}), 1, 1),
                job(
                    json!({"wandb.ai/monitor": "true", "launchgate.io/queue": "gpu"}),
                    1,
                    1,
                ),
            ),
            true,
        ),
        (
            Case {
                namespace: "team-b",
                ..case(
                    "in a namespace whose default queue it is, an empty queue label was this queue",
                    wide(json!({"wandb.ai/monitor": "true", "launchgate.io/queue": ""})),
                    wide(launch("gpu")),
                )
            },
            true,
        ),
        (
            case(
                "a tenant's label change of a Job already in the queue",
                wide(launch("gpu")),
                noted,
            ),
            true,
        ),
        (
            Case {
                user: KUEUE,
                ..case(
                    "Kueue's admission UPDATE of a Job already in the queue",
                    wide(launch("gpu")),
                    unsuspended,
                )
            },
            true,
        ),
        (
            case(
                "a tenant's UPDATE of a Job an exemption admitted",
                mark(job(launch("gpu"), 1, 8)),
                image,
            ),
            false,
        ),
        (
            Case {
                groups: &["platform-admins"],
                ..case(
                    "the exempt group labels its Job into the queue",
                    wide(json!({})),
                    wide(launch("gpu")),
                )
            },
            true,
        ),
        (
            case(
                "moved out of the queue into one without limits",
                wide(launch("gpu")),
                wide(launch("cpu")),
            ),
            true,
        ),
    ];
    for (case, admitted) in &cases {
        // One that brings the Job into the queue reaches the webhook too (its rules native
        // policies cannot carry, in `hybrid` mode).
        let kind = crate::WorkloadKind::of_object(&case.new).unwrap();
        let gpu = policy.queue("gpu").unwrap();
        let enters = !policy.in_queue(kind, &case.old, Some(case.namespace), gpu)
            && policy.in_queue(kind, &case.new, Some(case.namespace), gpu);
        assert!(
            !enters || sent_to_the_webhook(&policy, case),
            "{}: not sent to the validating webhook",
            case.what
        );
        let webhook = by_webhook(&subset, case);
        assert_eq!(
            webhook.is_ok(),
            *admitted,
            "{}: the webhook's answer {webhook:?}",
            case.what
        );
        let queue = if case.new["metadata"]["labels"]["launchgate.io/queue"] == "cpu" {
            "cpu"
        } else {
            "gpu"
        };
        let native = by_native(&compiled, &subset, queue, case);
        match (&webhook, &native) {
            (Ok(w), Ok(n)) => assert_eq!(w, n, "{}: stored differently", case.what),
            (Err(_), Err(_)) => {}
            _ => panic!(
                "{}: the webhook {webhook:?}, the native policies {native:?}",
                case.what
            ),
        }
    }
    // The 16 × 4-GPU Job is denied by the totals on both sides.
    let relabelled = &cases[0].0;
    for answer in [
        by_webhook(&subset, relabelled),
        by_native(&compiled, &subset, "gpu", relabelled),
    ] {
        let message = answer.unwrap_err();
        assert!(
            message.contains("total nvidia.com/gpu over all pods=64 exceeds maximum 16"),
            "{message}"
        );
    }
}

/// An UPDATE of a workload already in its queue that grows it is refused by the webhook only
/// (it compares with the old object's violations), and the report says so.
#[test]
fn an_update_within_the_queue_is_the_webhooks_and_the_report_says_so() {
    let policy = Policy::from_yaml(CONFIG).unwrap();
    let subset = as_native(&policy).unwrap();
    let compiled = compile(&policy, &Options::default());
    let grown = case(
        "a Job already in the queue grown from 16 to 20 GPUs",
        job(launch("gpu"), 4, 4),
        job(launch("gpu"), 5, 4),
    );
    assert!(by_webhook(&subset, &grown).is_err());
    assert!(by_native(&compiled.objects, &subset, "gpu", &grown).is_ok());
    let update = compiled
        .report
        .webhook_only
        .iter()
        .find(|g| g.what == "UPDATE")
        .expect("the report's UPDATE entry");
    assert!(
        update.why.contains("already in its queue")
            && update.why.contains("brings a workload into a queue"),
        "{}",
        update.why
    );
    let queue = compiled
        .report
        .queues
        .iter()
        .find(|q| q.queue == "gpu")
        .unwrap();
    assert!(
        queue
            .native
            .iter()
            .any(|n| n.starts_with("an UPDATE that brings a workload into the queue")),
        "{:?}",
        queue.native
    );
}
