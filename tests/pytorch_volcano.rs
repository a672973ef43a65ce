//! Volcano Jobs with the pytorch plugin and their pods, through the pure core.
//!
//! * every `pytorch_test.go` vector of the reference notes (same env, same port — except the
//!   duplicate `pytorchjob-port` name, where our fixed behaviour is asserted);
//! * the recorded `create-vcjob-wandb-job-run42` request followed by its pods built the way the
//!   Volcano controller builds them, and the recorded pods as they are (owner Job read from
//!   the cluster view; offline: RANK and a warning);
//! * extra tasks, two masters, user values, override, sidecars, idempotency.

mod common;

use common::{fixture_request, mutated, pytorch_only, synthetic};
use launchgate::Policy;
use launchgate::admission::AdmissionRequest;
use launchgate::cluster::{ClusterView, NoCluster, StaticCluster};
use launchgate::review::{Endpoint, decide};
use serde_json::{Map, Value, json};

struct Mutated {
    object: Value,
    warnings: Vec<String>,
    patch_len: usize,
}

fn mutate(policy: &Policy, request: &AdmissionRequest, cluster: &dyn ClusterView) -> Mutated {
    let (object, d) = mutated(policy, request, cluster);
    Mutated {
        object,
        warnings: d.response.warnings,
        patch_len: d.patch.0.len(),
    }
}

fn mutate_object(policy: &Policy, object: Value, cluster: &dyn ClusterView) -> Mutated {
    let request = synthetic(object);
    let m = mutate(policy, &request, cluster);
    // Idempotency: a second pass over the result changes nothing.
    let again = synthetic(m.object.clone());
    let second = decide(policy, Endpoint::Mutate, &again, cluster);
    assert!(
        second.patch.0.is_empty(),
        "second pass patched {:?}",
        second.patch
    );
    m
}

fn env_pairs(container: &Value) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .map(|e| {
                    let value = match e.get("value") {
                        Some(v) => v.as_str().unwrap().to_string(),
                        None => e["valueFrom"].to_string(),
                    };
                    (e["name"].as_str().unwrap().to_string(), value)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn env_of(container: &Value, name: &str) -> Option<String> {
    env_pairs(container)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn assert_unique(items: &Value, what: &str) {
    let names: Vec<&str> = items
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["name"].as_str())
        .collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        names.len(),
        unique.len(),
        "duplicate {what} names: {names:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Upstream vectors: volcano pkg/controllers/job/plugins/distributed-framework/pytorch/pytorch_test.go

/// The upstream test Job `test-pytorch`: `tasks` is `[(name, replicas)]`, templates empty.
fn upstream_job(tasks: &[(&str, i64)]) -> Value {
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|(name, replicas)| {
            json!({"name": name, "replicas": replicas,
                   "template": {"spec": {"containers": [{"name": "c"}]}}})
        })
        .collect();
    json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "test-pytorch", "namespace": "default",
                        "labels": {"launchgate.io/queue": "q"}},
           "spec": {"plugins": {"pytorch": []}, "tasks": tasks}})
}

/// A pod of `test-pytorch` as the Volcano controller makes it (labels + annotations).
fn upstream_pod(name: &str, task: Option<&str>, index: &str, ports: Option<Value>) -> Value {
    let mut meta = Map::new();
    meta.insert("volcano.sh/job-name".into(), json!("test-pytorch"));
    meta.insert("volcano.sh/task-index".into(), json!(index));
    if let Some(task) = task {
        meta.insert("volcano.sh/task-spec".into(), json!(task));
    }
    let mut labels = meta.clone();
    labels.insert("launchgate.io/queue".into(), json!("q"));
    let mut container = json!({"name": "c"});
    if let Some(ports) = ports {
        container["ports"] = ports;
    }
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "labels": labels, "annotations": meta},
           "spec": {"containers": [container]}})
}

struct Vector {
    name: &'static str,
    tasks: &'static [(&'static str, i64)],
    pod: &'static str,
    task: Option<&'static str>,
    index: &'static str,
    ports_in: Option<&'static str>,
    /// Expected `Ports[0].containerPort`, `None` for "Ports == nil".
    port: Option<i64>,
    env: &'static [(&'static str, &'static str)],
}

const ADDR: &str = "test-pytorch-master-0.test-pytorch";

fn vectors() -> Vec<Vector> {
    let three = [("master", 1), ("worker", 2), ("extra", 2)];
    let three: &'static [(&str, i64)] = Box::leak(Box::new(three));
    vec![
        Vector {
            name: "test pod without master",
            tasks: &[("worker", 1)],
            pod: "test-pytorch-worker-0",
            task: None,
            index: "0",
            ports_in: None,
            port: None,
            env: &[],
        },
        Vector {
            name: "test master pod without port",
            tasks: &[("master", 1), ("worker", 1)],
            pod: "test-pytorch-master-0",
            task: Some("master"),
            index: "0",
            ports_in: None,
            port: Some(23456),
            env: &[
                ("MASTER_ADDR", ADDR),
                ("MASTER_PORT", "23456"),
                ("WORLD_SIZE", "2"),
                ("RANK", "0"),
            ],
        },
        Vector {
            name: "test master pod with port",
            tasks: &[("master", 1), ("worker", 1)],
            pod: "test-pytorch-master-0",
            task: Some("master"),
            index: "0",
            ports_in: Some(r#"[{"name": "pytorchjob-port", "containerPort": 23456}]"#),
            port: Some(23456),
            env: &[
                ("MASTER_ADDR", ADDR),
                ("MASTER_PORT", "23456"),
                ("WORLD_SIZE", "2"),
                ("RANK", "0"),
            ],
        },
        Vector {
            name: "test master pod env",
            tasks: three,
            pod: "test-pytorch-master-0",
            task: Some("master"),
            index: "0",
            ports_in: Some(r#"[{"name": "pytorchjob-port", "containerPort": 123}]"#),
            port: Some(123),
            env: &[
                ("MASTER_ADDR", ADDR),
                ("MASTER_PORT", "23456"),
                ("WORLD_SIZE", "3"),
                ("RANK", "0"),
            ],
        },
        Vector {
            name: "test worker-1 pod env",
            tasks: three,
            pod: "test-pytorch-worker-0",
            task: Some("worker"),
            index: "0",
            ports_in: Some(r#"[{"name": "pytorchjob-port", "containerPort": 123}]"#),
            port: Some(123),
            env: &[
                ("MASTER_ADDR", ADDR),
                ("MASTER_PORT", "23456"),
                ("WORLD_SIZE", "3"),
                ("RANK", "1"),
            ],
        },
        Vector {
            name: "test worker-2 pod env",
            tasks: three,
            pod: "test-pytorch-worker-1",
            task: Some("worker"),
            index: "1",
            ports_in: Some(r#"[{"name": "pytorchjob-port", "containerPort": 123}]"#),
            port: Some(123),
            env: &[
                ("MASTER_ADDR", ADDR),
                ("MASTER_PORT", "23456"),
                ("WORLD_SIZE", "3"),
                ("RANK", "2"),
            ],
        },
    ]
}

fn check_vector(v: &Vector, pod: &Value, warnings: &[String]) {
    let c = &pod["spec"]["containers"][0];
    assert_eq!(env_pairs(c), pairs(v.env), "{}: env", v.name);
    match v.port {
        None => assert!(c.get("ports").is_none(), "{}: Ports == nil", v.name),
        Some(port) => assert_eq!(c["ports"][0]["containerPort"], port, "{}", v.name),
    }
    if let Some(ports_in) = v.ports_in {
        // Fixed upstream bug: a port of the same name is never added a second time.
        let ports_in: Value = serde_json::from_str(ports_in).unwrap();
        assert_eq!(c["ports"], ports_in, "{}: ports unchanged", v.name);
        if port_number(&ports_in) != 23456 {
            assert!(
                warnings
                    .iter()
                    .any(|w| w.contains("pytorchjob-port as 123")),
                "{}: {warnings:?}",
                v.name
            );
        }
    } else if v.port.is_some() {
        assert_eq!(
            c["ports"],
            json!([{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}]),
            "{}",
            v.name
        );
    }
    assert_unique(&c["ports"], "port");
}

fn port_number(ports: &Value) -> i64 {
    ports[0]["containerPort"].as_i64().unwrap()
}

#[test]
fn upstream_vectors_pod_with_owner_job_from_the_cluster_view() {
    let policy = pytorch_only("{torchrun: false}");
    for v in vectors() {
        let cluster = StaticCluster::default().with_workload(upstream_job(v.tasks));
        let ports = v.ports_in.map(|p| serde_json::from_str(p).unwrap());
        let pod = upstream_pod(v.pod, v.task, v.index, ports);
        let m = mutate_object(&policy, pod, &cluster);
        check_vector(&v, &m.object, &m.warnings);
    }
}

/// The same vectors, the launchgate way: the Job is mutated at admission, the controller builds
/// the pod from the mutated task template, and the pod webhook adds only RANK.
#[test]
fn upstream_vectors_job_then_pod_built_from_the_mutated_template() {
    let policy = pytorch_only("{torchrun: false}");
    for v in vectors() {
        let mut job = upstream_job(v.tasks);
        let task_name = v.task.unwrap_or("default");
        // The vector's container ports are part of the task template.
        if let Some(ports_in) = v.ports_in {
            for task in job["spec"]["tasks"].as_array_mut().unwrap() {
                task["template"]["spec"]["containers"][0]["ports"] =
                    serde_json::from_str(ports_in).unwrap();
            }
        }
        let job_m = mutate_object(&policy, job, &NoCluster);
        let template = job_m.object["spec"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == task_name)
            .map(|t| t["template"].clone())
            .unwrap_or_else(|| json!({"spec": {"containers": [{"name": "c"}]}}));
        let pod = controller_pod(
            &template,
            &upstream_pod(v.pod, v.task, v.index, None)["metadata"],
            None,
        );
        let mut warnings = job_m.warnings.clone();
        let m = mutate_object(&policy, pod, &NoCluster);
        warnings.extend(m.warnings);
        check_vector(&v, &m.object, &warnings);
    }
}

#[test]
fn upstream_vectors_with_torchrun_add_consistent_pet_twins() {
    let policy = pytorch_only("{nprocPerNode: auto}");
    let cluster = StaticCluster::default().with_workload(upstream_job(&[
        ("master", 1),
        ("worker", 2),
        ("extra", 2),
    ]));
    let m = mutate_object(
        &policy,
        upstream_pod("test-pytorch-worker-1", Some("worker"), "1", None),
        &cluster,
    );
    let c = &m.object["spec"]["containers"][0];
    assert_eq!(
        env_pairs(c),
        pairs(&[
            ("MASTER_ADDR", ADDR),
            ("MASTER_PORT", "23456"),
            ("WORLD_SIZE", "3"),
            ("PET_MASTER_ADDR", ADDR),
            ("PET_MASTER_PORT", "23456"),
            ("PET_NNODES", "3"),
            ("PET_NPROC_PER_NODE", "auto"),
            ("RANK", "2"),
            ("PET_NODE_RANK", "2"),
        ])
    );
}

// ---------------------------------------------------------------------------------------------
// Acceptance 2: the recorded Volcano Job and its pods.

/// Builds a pod the way the Volcano job controller does: the task template (metadata and
/// spec) plus the recorded pod's name, `volcano.sh/*` labels and annotations, and the
/// hostname/subdomain the svc plugin sets.
fn controller_pod(template: &Value, recorded_meta: &Value, recorded_spec: Option<&Value>) -> Value {
    let mut meta = template
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| json!({}));
    for key in ["name", "namespace"] {
        if let Some(v) = recorded_meta.get(key) {
            meta[key] = v.clone();
        }
    }
    for key in ["labels", "annotations"] {
        let mut merged = meta
            .get(key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(extra) = recorded_meta.get(key).and_then(Value::as_object) {
            merged.extend(extra.clone());
        }
        meta[key] = Value::Object(merged);
    }
    let mut spec = template["spec"].clone();
    if let Some(recorded) = recorded_spec {
        for key in ["hostname", "subdomain"] {
            if let Some(v) = recorded.get(key) {
                spec[key] = v.clone();
            }
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

const RUN42_PODS: [(&str, &str); 3] = [
    ("create-pod-wandb-job-run42-master-0.json", "0"),
    ("create-pod-wandb-job-run42-worker-0.json", "1"),
    ("create-pod-wandb-job-run42-worker-1.json", "2"),
];
const RUN42_ADDR: &str = "wandb-job-run42-master-0.wandb-job-run42";

fn assert_run42_wired(name: &str, pod: &Value, rank: &str) {
    let containers = pod["spec"]["containers"].as_array().unwrap();
    assert!(!containers.is_empty());
    for c in containers {
        assert_eq!(
            env_of(c, "MASTER_ADDR").as_deref(),
            Some(RUN42_ADDR),
            "{name}"
        );
        assert_eq!(env_of(c, "MASTER_PORT").as_deref(), Some("23456"), "{name}");
        assert_eq!(env_of(c, "WORLD_SIZE").as_deref(), Some("3"), "{name}");
        assert_eq!(env_of(c, "RANK").as_deref(), Some(rank), "{name}");
        assert_eq!(
            env_of(c, "PET_MASTER_ADDR").as_deref(),
            Some(RUN42_ADDR),
            "{name}"
        );
        assert_eq!(env_of(c, "PET_NNODES").as_deref(), Some("3"), "{name}");
        assert_eq!(env_of(c, "PET_NODE_RANK").as_deref(), Some(rank), "{name}");
        let torch_ports: Vec<&Value> = c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["name"] == "pytorchjob-port")
            .collect();
        assert_eq!(torch_ports.len(), 1, "{name}: one pytorchjob-port");
        assert_eq!(torch_ports[0]["containerPort"], 23456, "{name}");
        assert_unique(&c["env"], "env");
        assert_unique(&c["ports"], "port");
    }
}

#[test]
fn recorded_vcjob_then_controller_built_pods_are_fully_wired() {
    let policy = Policy::embedded_default();
    let job_request = fixture_request("create-vcjob-wandb-job-run42.json");
    let job = mutate(&policy, &job_request, &NoCluster);
    assert!(
        job.warnings.iter().all(|w| !w.contains("PyTorch")),
        "{:?}",
        job.warnings
    );
    for (index, task) in job.object["spec"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let c = &task["template"]["spec"]["containers"][0];
        assert_eq!(
            env_of(c, "MASTER_ADDR").as_deref(),
            Some(RUN42_ADDR),
            "task {index}"
        );
        assert_eq!(env_of(c, "WORLD_SIZE").as_deref(), Some("3"));
        assert_eq!(env_of(c, "RANK"), None, "RANK is per pod");
    }
    for (name, rank) in RUN42_PODS {
        let recorded = fixture_request(name);
        let recorded_pod = recorded.object.as_ref().unwrap();
        let task = recorded_pod["metadata"]["annotations"]["volcano.sh/task-spec"]
            .as_str()
            .unwrap();
        let template = job.object["spec"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == task)
            .unwrap()["template"]
            .clone();
        let mut request = recorded.clone();
        request.object = Some(controller_pod(
            &template,
            &recorded_pod["metadata"],
            Some(&recorded_pod["spec"]),
        ));
        let pod = mutate(&policy, &request, &NoCluster);
        assert_run42_wired(name, &pod.object, rank);
        assert!(
            pod.warnings
                .iter()
                .all(|w| !w.contains("owner Volcano Job")),
            "{name}: no lookup needed: {:?}",
            pod.warnings
        );
        // A second pass gives an empty patch.
        let mut again = request.clone();
        again.object = Some(pod.object.clone());
        assert_eq!(mutate(&policy, &again, &NoCluster).patch_len, 0, "{name}");
    }
}

#[test]
fn recorded_pods_of_an_unmutated_job_are_wired_from_the_owner_job() {
    let policy = Policy::embedded_default();
    let job = fixture_request("create-vcjob-wandb-job-run42.json")
        .object
        .unwrap();
    let cluster = StaticCluster::default().with_workload(job);
    for (name, rank) in RUN42_PODS {
        let request = fixture_request(name);
        let pod = mutate(&policy, &request, &cluster);
        assert_run42_wired(name, &pod.object, rank);
        let mut again = request.clone();
        again.object = Some(pod.object.clone());
        assert_eq!(mutate(&policy, &again, &cluster).patch_len, 0, "{name}");
    }
}

#[test]
fn recorded_pods_offline_get_rank_and_a_warning_about_the_rest() {
    let policy = Policy::embedded_default();
    for (name, rank) in RUN42_PODS {
        let pod = mutate(&policy, &fixture_request(name), &NoCluster);
        let c = &pod.object["spec"]["containers"][0];
        assert_eq!(env_of(c, "RANK").as_deref(), Some(rank), "{name}");
        assert_eq!(env_of(c, "PET_NODE_RANK").as_deref(), Some(rank), "{name}");
        assert_eq!(env_of(c, "MASTER_ADDR"), None, "{name}: not guessed");
        assert!(
            pod.warnings
                .iter()
                .any(|w| w.contains("cannot be read offline")
                    && w.contains("MASTER_ADDR, MASTER_PORT and WORLD_SIZE")),
            "{name}: {:?}",
            pod.warnings
        );
    }
    // Connected, but the Job is not (yet) known: same, with a different reason.
    let pod = mutate(
        &policy,
        &fixture_request("create-pod-wandb-job-run42-worker-1.json"),
        &StaticCluster::default(),
    );
    assert!(
        pod.warnings.iter().any(|w| w.contains("was not found")),
        "{:?}",
        pod.warnings
    );
}

// ---------------------------------------------------------------------------------------------
// Acceptance 4.

#[test]
fn extra_task_pod_gets_job_values_but_no_rank_and_no_port() {
    let policy = pytorch_only("{}");
    let job = upstream_job(&[("master", 1), ("worker", 2), ("tensorboard", 1)]);
    // Through the owner lookup ...
    let cluster = StaticCluster::default().with_workload(job.clone());
    let pod = upstream_pod("test-pytorch-tensorboard-0", Some("tensorboard"), "0", None);
    let m = mutate_object(&policy, pod.clone(), &cluster);
    let c = &m.object["spec"]["containers"][0];
    assert_eq!(env_of(c, "MASTER_ADDR").as_deref(), Some(ADDR));
    assert_eq!(
        env_of(c, "WORLD_SIZE").as_deref(),
        Some("3"),
        "tensorboard not counted"
    );
    assert_eq!(env_of(c, "RANK"), None);
    assert_eq!(env_of(c, "PET_NODE_RANK"), None);
    assert!(c.get("ports").is_none());
    // ... and through the mutated template.
    let job_m = mutate_object(&policy, job, &NoCluster);
    let template = job_m.object["spec"]["tasks"][2]["template"].clone();
    let built = controller_pod(&template, &pod["metadata"], None);
    let m2 = mutate_object(&policy, built.clone(), &NoCluster);
    assert_eq!(m2.patch_len, 0, "nothing per pod for an extra task");
    assert_eq!(env_of(&m2.object["spec"]["containers"][0], "RANK"), None);
    // Offline, an extra task's pod of an unmutated job is left alone.
    let m3 = mutate_object(&policy, pod, &NoCluster);
    assert_eq!(env_of(&m3.object["spec"]["containers"][0], "RANK"), None);
}

#[test]
fn two_master_replicas_are_denied_with_a_clear_message() {
    let policy = pytorch_only("{}");
    let job = upstream_job(&[("master", 2), ("worker", 2)]);
    let request = synthetic(job.clone());
    let d = decide(&policy, Endpoint::Validate, &request, &NoCluster);
    assert!(!d.response.allowed);
    let message = d.response.status.unwrap().message;
    assert!(
        message.contains("spec.tasks[0].replicas of the PyTorch master task \"master\" is 2")
            && message.contains("must be exactly 1"),
        "{message}"
    );
    // The mutating webhook leaves it unwired and says why.
    let m = mutate(&policy, &request, &NoCluster);
    for i in 0..2 {
        assert_eq!(
            m.object["spec"]["tasks"][i]["template"]["spec"],
            job["spec"]["tasks"][i]["template"]["spec"],
            "task {i} left unwired"
        );
    }
    assert!(
        m.warnings.iter().any(|w| w.contains("is 2")),
        "{:?}",
        m.warnings
    );
    // onUnwirable: warn admits it.
    let warn = pytorch_only("{onUnwirable: warn}");
    assert!(
        decide(&warn, Endpoint::Validate, &request, &NoCluster)
            .response
            .allowed
    );
    // A missing master task is denied too.
    let request = synthetic(upstream_job(&[("worker", 2)]));
    let d = decide(&policy, Endpoint::Validate, &request, &NoCluster);
    let message = d.response.status.unwrap().message;
    assert!(
        message.contains("no master task \"master\" (tasks: worker)"),
        "{message}"
    );
}

fn job_with_master_env(env: Value, sidecar: bool) -> Value {
    let mut job = upstream_job(&[("master", 1), ("worker", 1)]);
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = env;
    if sidecar {
        for task in job["spec"]["tasks"].as_array_mut().unwrap() {
            task["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "istio-proxy", "image": "istio/proxyv2:1.22.0"}));
        }
    }
    job
}

#[test]
fn user_set_master_port_is_kept_and_mirrored() {
    let policy = pytorch_only("{}");
    let job = job_with_master_env(json!([{"name": "MASTER_PORT", "value": "29500"}]), false);
    let m = mutate_object(&policy, job, &NoCluster);
    let c = &m.object["spec"]["tasks"][0]["template"]["spec"]["containers"][0];
    assert_eq!(env_of(c, "MASTER_PORT").as_deref(), Some("29500"));
    assert_eq!(env_of(c, "PET_MASTER_PORT").as_deref(), Some("29500"));
    assert_eq!(env_of(c, "MASTER_ADDR").as_deref(), Some(ADDR));
    assert_unique(&c["env"], "env");
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("keeps its MASTER_PORT=\"29500\"")),
        "{:?}",
        m.warnings
    );
}

#[test]
fn override_mode_replaces_in_place_without_duplicates() {
    let policy = pytorch_only("{override: true}");
    let job = job_with_master_env(
        json!([
            {"name": "WORLD_SIZE", "value": "16"},
            {"name": "KEEP", "value": "x"},
            {"name": "MASTER_ADDR", "value": "localhost"}
        ]),
        false,
    );
    let m = mutate_object(&policy, job, &NoCluster);
    let c = &m.object["spec"]["tasks"][0]["template"]["spec"]["containers"][0];
    let env = env_pairs(c);
    assert_eq!(
        env[0],
        ("WORLD_SIZE".to_string(), "2".to_string()),
        "in place"
    );
    assert_eq!(env[1], ("KEEP".to_string(), "x".to_string()));
    assert_eq!(env[2], ("MASTER_ADDR".to_string(), ADDR.to_string()));
    assert_unique(&c["env"], "env");
}

#[test]
fn sidecars_get_neither_env_nor_port() {
    let policy = pytorch_only("{waitForMaster: {enabled: true}}");
    let job = job_with_master_env(json!([]), true);
    let original = job.clone();
    let m = mutate_object(&policy, job, &NoCluster);
    for (i, task) in m.object["spec"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let containers = task["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(
            containers[1], original["spec"]["tasks"][i]["template"]["spec"]["containers"][1],
            "sidecar of task {i} untouched"
        );
        assert_eq!(env_of(&containers[0], "WORLD_SIZE").as_deref(), Some("2"));
    }
    // The same for a pod wired from the owner Job.
    let cluster = StaticCluster::default().with_workload(original.clone());
    let mut pod = upstream_pod("test-pytorch-worker-0", Some("worker"), "0", None);
    pod["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "linkerd-proxy"}));
    let m = mutate_object(&policy, pod, &cluster);
    assert_eq!(
        m.object["spec"]["containers"][1],
        json!({"name": "linkerd-proxy"})
    );
    assert_eq!(
        env_of(&m.object["spec"]["containers"][0], "RANK").as_deref(),
        Some("1")
    );
    assert_eq!(
        m.object["spec"]["initContainers"][0]["name"],
        "wait-for-master"
    );
}

#[test]
fn rank_comes_from_the_annotation_never_the_pod_name() {
    let policy = pytorch_only("{}");
    let cluster =
        StaticCluster::default().with_workload(upstream_job(&[("master", 1), ("worker", 8)]));
    // A name whose last segment disagrees with the index, and one with no index at all.
    let m = mutate_object(
        &policy,
        upstream_pod("oddly-named-pod-7", Some("worker"), "5", None),
        &cluster,
    );
    assert_eq!(
        env_of(&m.object["spec"]["containers"][0], "RANK").as_deref(),
        Some("6")
    );
    let mut pod = upstream_pod("x", Some("worker"), "0", None);
    pod["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("volcano.sh/task-index");
    pod["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("volcano.sh/task-index");
    let m = mutate_object(&policy, pod, &cluster);
    assert_eq!(env_of(&m.object["spec"]["containers"][0], "RANK"), None);
    assert!(
        m.warnings.iter().any(|w| w.contains("RANK was not set")),
        "{:?}",
        m.warnings
    );
}
