//! Mutations against what real clusters send, through `launchgate::review` with the recorded
//! AdmissionReviews (already defaulted by the API server: `backoffLimit: 6`,
//! `dnsPolicy: ClusterFirst`, `securityContext: {}`, `generateName` without a name) edited the
//! way the W&B agent, server-side apply, Volcano and the Job controller edit them:
//!
//! * explicit user intent from server-side apply (`managedFields` with `operation: Apply`);
//! * `generateName` workloads wired at pod admission;
//! * hostNetwork pods get `dnsPolicy: ClusterFirstWithHostNet`;
//! * duplicated env names: the last entry is the one read and written;
//! * the cache is never pointed into a read-only mount; Windows pods get no cache;
//! * only PyTorch workloads get PyTorch env;
//! * pod-level `runAsNonRoot` never contradicts a root container;
//! * each default is one the owning operator keeps.
//!
//! Every case also checks reinvocation: mutating the patched object again gives no patch.

mod common;

use common::{decode_patch, fixture_json, indexed_pytorch_queue, review_response};
use launchgate::Policy;
use launchgate::review::Endpoint;
use serde_json::{Value, json};

/// One answer of the core: the patched object, the patch and the response.
#[allow(dead_code)] // fields and helpers used by later cases
struct Answer {
    object: Value,
    patch: json_patch::Patch,
    response: Value,
}

#[allow(dead_code)]
impl Answer {
    fn warnings(&self) -> Vec<String> {
        self.response["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    }

    fn allowed(&self) -> bool {
        self.response["allowed"] == true
    }

    fn message(&self) -> String {
        self.response["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// A recorded AdmissionReview with its `request.object` edited by `edit`.
fn recorded(name: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut review = fixture_json(name);
    edit(&mut review["request"]["object"]);
    review
}

fn call(policy: &Policy, endpoint: Endpoint, review_json: &Value) -> Answer {
    let response = review_response(policy, endpoint, review_json);
    let patch = decode_patch(&response).unwrap_or(json_patch::Patch(Vec::new()));
    let mut object = review_json["request"]["object"].clone();
    json_patch::patch(&mut object, &patch).expect("the patch applies");
    Answer {
        object,
        patch,
        response,
    }
}

/// Mutates, then checks that a second pass over the result (reinvocation) patches nothing.
fn mutate(policy: &Policy, review_json: &Value) -> Answer {
    let first = call(policy, Endpoint::Mutate, review_json);
    let mut again = review_json.clone();
    again["request"]["object"] = first.object.clone();
    let second = call(policy, Endpoint::Mutate, &again);
    assert!(
        second.patch.0.is_empty(),
        "reinvocation patched again: {:?}",
        second.patch
    );
    first
}

#[allow(dead_code)]
fn validate(policy: &Policy, review_json: &Value) -> Answer {
    call(policy, Endpoint::Validate, review_json)
}

/// The built-in policy with `queue_yaml` merged over queue gpu-queue's keys.
fn policy_with(queue_overrides: &str) -> Policy {
    let mut config: Value = serde_yaml::from_str(launchgate::policy::DEFAULT_CONFIG_YAML).unwrap();
    let overrides: Value = serde_yaml::from_str(queue_overrides).unwrap();
    for (k, v) in overrides.as_object().unwrap() {
        let queue = &mut config["queues"]["gpu-queue"];
        match (queue.get_mut(k), v) {
            (Some(Value::Object(existing)), Value::Object(new)) => {
                for (nk, nv) in new {
                    existing.insert(nk.clone(), nv.clone());
                }
            }
            _ => queue[k] = v.clone(),
        }
    }
    Policy::from_yaml(&serde_json::to_string(&config).unwrap()).unwrap()
}

/// Env entries of a container by name, in order.
fn env_values(container: &Value, name: &str) -> Vec<Value> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"] == name)
        .cloned()
        .collect()
}

/// The value the container sees for `name`: the last entry's literal value.
fn seen(container: &Value, name: &str) -> Option<String> {
    env_values(container, name)
        .last()
        .and_then(|e| e["value"].as_str().map(str::to_string))
}

// ---------------------------------------------------------------------------------------
// Env semantics: the last entry of a name wins.
// ---------------------------------------------------------------------------------------

#[test]
fn appended_env_is_read_and_followed_as_the_container_sees_it() {
    // A Volcano worker pod of a Job launchgate wired (rank offset on the template) after
    // Volcano's pytorch plugin appended its own MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK
    // behind the template's values; the user had written MASTER_PORT 29500, which launchgate
    // mirrored into PET_MASTER_PORT at Job admission.
    let review_json = recorded("create-pod-wandb-job-run42-worker-0.json", |pod| {
        pod["metadata"]["annotations"]["launchgate.io/pytorch-rank-offset"] = json!("1");
        pod["spec"]["containers"][0]["env"] = json!([
            {"name": "VK_TASK_INDEX", "value": "0"},
            {"name": "MASTER_ADDR", "value": "wandb-job-run42-master-0.wandb-job-run42"},
            {"name": "MASTER_PORT", "value": "29500"},
            {"name": "WORLD_SIZE", "value": "3"},
            {"name": "PET_MASTER_ADDR", "value": "wandb-job-run42-master-0.wandb-job-run42"},
            {"name": "PET_MASTER_PORT", "value": "29500"},
            {"name": "PET_NNODES", "value": "3"},
            {"name": "HF_HOME", "value": "/data/hf"},
            {"name": "MASTER_ADDR", "value": "wandb-job-run42-master-0.wandb-job-run42"},
            {"name": "MASTER_PORT", "value": "23456"},
            {"name": "WORLD_SIZE", "value": "3"},
            {"name": "RANK", "value": "1"},
            {"name": "HF_HOME", "value": "/scratch/hf"}
        ]);
    });
    let a = mutate(&Policy::embedded_default(), &review_json);
    let c = &a.object["spec"]["containers"][0];
    assert_eq!(seen(c, "MASTER_PORT").as_deref(), Some("23456"));
    assert_eq!(
        seen(c, "PET_MASTER_PORT").as_deref(),
        Some("23456"),
        "torchrun must dial the port env:// sees"
    );
    assert_eq!(seen(c, "RANK").as_deref(), Some("1"));
    assert_eq!(seen(c, "PET_NODE_RANK").as_deref(), Some("1"));
    assert_eq!(env_values(c, "PET_NODE_RANK").len(), 1);
    assert_eq!(
        seen(c, "HF_HOME").as_deref(),
        Some("/scratch/hf"),
        "the user's (last) HF_HOME is kept"
    );
    assert_eq!(env_values(c, "HF_HOME").len(), 2, "no third HF_HOME");
}

#[test]
fn the_queue_named_by_the_last_agent_env_entry_is_used() {
    let policy = Policy::from_yaml(
        "defaultQueue: a\nqueues:\n  a: {securityContext: {enabled: false}}\n  b: {securityContext: {enabled: true}}\n",
    )
    .unwrap();
    let review_json = recorded("create-pod-demo.json", |pod| {
        pod["metadata"]["labels"] = json!({"wandb.ai/monitor": "true"});
        pod["spec"]["containers"][0]["env"] = json!([
            {"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "a"},
            {"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "b"}
        ]);
    });
    let a = mutate(&policy, &review_json);
    assert_eq!(a.object["metadata"]["labels"]["launchgate.io/queue"], "b");
}

// ---------------------------------------------------------------------------------------
// Pod-level runAsNonRoot never contradicts a container.
// ---------------------------------------------------------------------------------------

#[test]
fn pod_run_as_non_root_is_not_added_over_a_root_container() {
    let policy = policy_with("securityContext: {runAsNonRoot: true}");
    let review_json = recorded("create-job-demo.json", |job| {
        let containers = &mut job["spec"]["template"]["spec"]["containers"];
        containers[0]["securityContext"] = json!({"runAsUser": 0});
    });
    let a = mutate(&policy, &review_json);
    let pod_sc = &a.object["spec"]["template"]["spec"]["securityContext"];
    assert!(pod_sc.get("runAsNonRoot").is_none(), "{pod_sc}");
    assert!(
        a.warnings()
            .iter()
            .any(|w| w.contains("UID 0") && w.contains("runAsNonRoot")),
        "{:?}",
        a.warnings()
    );
    // Without the root container the pod gets it.
    let a = mutate(&policy, &recorded("create-job-demo.json", |_| {}));
    assert_eq!(
        a.object["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
}

// ---------------------------------------------------------------------------------------
// Explicit user intent: server-side apply owners are the user.
// ---------------------------------------------------------------------------------------

/// The request as `kubectl apply --server-side` sends it: no last-applied annotation, an
/// `operation: Apply` managedFields entry owning exactly the fields in the manifest.
fn server_side_applied(job: &mut Value, fields: Value) {
    job["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    job["metadata"]["managedFields"] = json!([{
        "manager": "kubectl", "operation": "Apply", "apiVersion": "batch/v1",
        "time": "2026-11-22T10:21:59Z", "fieldsType": "FieldsV1", "fieldsV1": fields
    }]);
}

#[test]
fn backoff_limit_six_owned_by_a_server_side_apply_manager_is_kept() {
    let policy = Policy::embedded_default();
    let review_json = recorded("create-job-ddp.json", |job| {
        server_side_applied(
            job,
            json!({"f:spec": {"f:backoffLimit": {}, "f:completions": {}, "f:template": {"f:spec": {"f:subdomain": {}}}}}),
        )
    });
    let a = mutate(&policy, &review_json);
    assert_eq!(a.object["spec"]["backoffLimit"], 6);
    // The same Job applied without backoffLimit: the API server's 6 is replaced.
    let review_json = recorded("create-job-ddp.json", |job| {
        server_side_applied(job, json!({"f:spec": {"f:completions": {}}}))
    });
    let a = mutate(&policy, &review_json);
    assert_eq!(a.object["spec"]["backoffLimit"], 0);
}

// ---------------------------------------------------------------------------------------
// hostNetwork pods resolve pod DNS names only with ClusterFirstWithHostNet.
// ---------------------------------------------------------------------------------------

#[test]
fn host_network_indexed_job_gets_cluster_first_with_host_net() {
    let policy = indexed_pytorch_queue();
    // As the API server sends it: dnsPolicy already defaulted to ClusterFirst.
    let review_json = recorded("create-job-ddp.json", |job| {
        job["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
    });
    assert_eq!(
        review_json["request"]["object"]["spec"]["template"]["spec"]["dnsPolicy"],
        "ClusterFirst"
    );
    let a = mutate(&policy, &review_json);
    let spec = &a.object["spec"]["template"]["spec"];
    assert_eq!(spec["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(
        spec["containers"][0]["ports"],
        json!([{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}])
    );
    assert!(validate(&policy, &review_json).allowed());
}

#[test]
fn host_network_job_whose_user_wrote_cluster_first_is_denied_with_the_reason() {
    let policy = indexed_pytorch_queue();
    let review_json = recorded("create-job-ddp.json", |job| {
        job["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
        server_side_applied(
            job,
            json!({"f:spec": {"f:completions": {}, "f:template": {"f:spec": {"f:dnsPolicy": {}, "f:hostNetwork": {}}}}}),
        );
    });
    let a = mutate(&policy, &review_json);
    assert_eq!(
        a.object["spec"]["template"]["spec"]["dnsPolicy"],
        "ClusterFirst"
    );
    assert!(
        a.warnings()
            .iter()
            .any(|w| w.contains("which you wrote") && w.contains("ClusterFirstWithHostNet")),
        "{:?}",
        a.warnings()
    );
    let v = validate(&policy, &review_json);
    assert!(!v.allowed());
    assert!(
        v.message()
            .contains("hostNetwork with dnsPolicy: ClusterFirst"),
        "{}",
        v.message()
    );
    // onUnwirable: warn admits it with the same explanation.
    let warn = policy_with("pytorch: {onUnwirable: warn}");
    assert!(validate(&warn, &review_json).allowed());
}

#[test]
fn host_network_volcano_task_gets_cluster_first_with_host_net_unless_written() {
    let policy = Policy::embedded_default();
    let review_json = recorded("create-vcjob-wandb-job-run42.json", |job| {
        for t in 0..2 {
            job["spec"]["tasks"][t]["template"]["spec"]["hostNetwork"] = json!(true);
        }
    });
    let a = mutate(&policy, &review_json);
    for t in 0..2 {
        assert_eq!(
            a.object["spec"]["tasks"][t]["template"]["spec"]["dnsPolicy"],
            "ClusterFirstWithHostNet"
        );
    }
    // The template of a custom resource is not defaulted: a dnsPolicy there is the user's.
    let review_json = recorded("create-vcjob-wandb-job-run42.json", |job| {
        job["spec"]["tasks"][1]["template"]["spec"]["hostNetwork"] = json!(true);
        job["spec"]["tasks"][1]["template"]["spec"]["dnsPolicy"] = json!("Default");
    });
    let v = validate(&policy, &review_json);
    assert!(!v.allowed());
    assert!(
        v.message().contains("spec.tasks[1].template.spec"),
        "{}",
        v.message()
    );
}

// ---------------------------------------------------------------------------------------
// generateName workloads are wired at pod admission, never half-wired.
// ---------------------------------------------------------------------------------------

const PYTORCH_ENV: [&str; 8] = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_NNODES",
    "PET_NODE_RANK",
];

/// The request as the W&B agent's `generateName` create arrives: no name anywhere.
fn generate_name(review_json: &mut Value, prefix: &str) {
    review_json["request"]
        .as_object_mut()
        .unwrap()
        .remove("name");
    let meta = review_json["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap();
    meta.remove("name");
    meta.insert("generateName".into(), json!(prefix));
}

/// What a controller copies from a pod template into each pod: labels and annotations.
fn copy_template_metadata(pod: &mut Value, template: &Value) {
    for key in ["labels", "annotations"] {
        for (k, v) in template["metadata"][key].as_object().into_iter().flatten() {
            pod["metadata"][key][k] = v.clone();
        }
    }
}

#[test]
fn generate_name_indexed_job_is_wired_at_pod_admission() {
    let policy = indexed_pytorch_queue();
    let mut job_review = recorded("create-job-ddp.json", |_| {});
    generate_name(&mut job_review, "ddp-");
    let job = mutate(&policy, &job_review);
    assert!(validate(&policy, &job_review).allowed());
    let template = &job.object["spec"]["template"];
    for name in PYTORCH_ENV {
        assert!(
            env_values(&template["spec"]["containers"][0], name).is_empty(),
            "{name}: no half-wired template"
        );
    }
    // The Job controller names the Job ddp-x7k2p and creates its pods with the Job's name and
    // completion index in labels/annotations.
    for index in ["0", "1", "2"] {
        let pod_review = recorded(&format!("create-pod-ddp-{index}.json"), |pod| {
            copy_template_metadata(pod, template);
            pod["metadata"]["generateName"] = json!(format!("ddp-x7k2p-{index}-"));
            pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = json!("ddp-x7k2p");
            pod["metadata"]["labels"]["job-name"] = json!("ddp-x7k2p");
            pod["spec"]["hostname"] = json!(format!("ddp-x7k2p-{index}"));
        });
        let pod = mutate(&policy, &pod_review);
        let c = &pod.object["spec"]["containers"][0];
        assert_eq!(seen(c, "MASTER_ADDR").as_deref(), Some("ddp-x7k2p-0.ddp"));
        assert_eq!(
            seen(c, "PET_MASTER_ADDR").as_deref(),
            Some("ddp-x7k2p-0.ddp")
        );
        assert_eq!(seen(c, "WORLD_SIZE").as_deref(), Some("3"));
        assert_eq!(seen(c, "PET_NNODES").as_deref(), Some("3"));
        assert_eq!(
            env_values(c, "RANK")[0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        );
        assert_eq!(c["ports"][0]["name"], "pytorchjob-port");
    }
}

#[test]
fn generate_name_volcano_job_is_wired_at_pod_admission() {
    let policy = Policy::embedded_default();
    let mut job_review = recorded("create-vcjob-wandb-job-run42.json", |_| {});
    generate_name(&mut job_review, "wandb-job-");
    let job = mutate(&policy, &job_review);
    assert!(validate(&policy, &job_review).allowed());
    for t in 0..2 {
        let c = &job.object["spec"]["tasks"][t]["template"]["spec"]["containers"][0];
        assert!(
            env_values(c, "WORLD_SIZE").is_empty(),
            "task {t} half-wired"
        );
    }
    for (file, task, rank) in [
        ("create-pod-wandb-job-run42-master-0.json", 0, "0"),
        ("create-pod-wandb-job-run42-worker-0.json", 1, "1"),
        ("create-pod-wandb-job-run42-worker-1.json", 1, "2"),
    ] {
        let pod_review = recorded(file, |pod| {
            copy_template_metadata(pod, &job.object["spec"]["tasks"][task]["template"]);
            for key in ["labels", "annotations"] {
                pod["metadata"][key]["volcano.sh/job-name"] = json!("wandb-job-q8x2z");
            }
        });
        let pod = mutate(&policy, &pod_review);
        let c = &pod.object["spec"]["containers"][0];
        let addr = "wandb-job-q8x2z-master-0.wandb-job-q8x2z";
        assert_eq!(seen(c, "MASTER_ADDR").as_deref(), Some(addr), "{file}");
        assert_eq!(seen(c, "PET_MASTER_ADDR").as_deref(), Some(addr), "{file}");
        assert_eq!(seen(c, "WORLD_SIZE").as_deref(), Some("3"), "{file}");
        assert_eq!(seen(c, "RANK").as_deref(), Some(rank), "{file}");
        assert_eq!(seen(c, "PET_NODE_RANK").as_deref(), Some(rank), "{file}");
    }
}

#[test]
fn a_pod_that_cannot_be_completed_gets_no_half_wiring() {
    let policy = Policy::embedded_default();
    let pod_review = recorded("create-pod-ddp-1.json", |pod| {
        pod["metadata"]["annotations"]["launchgate.io/pytorch-wiring"] = json!(
            r#"{"masterAddr":"{job}-0.ddp","port":23456,"nnodes":3,"ranked":true,"waitForMaster":true}"#
        );
        let labels = pod["metadata"]["labels"].as_object_mut().unwrap();
        labels.insert("launchgate.io/queue".into(), json!("gpu-queue"));
        labels.remove("job-name");
        labels.remove("batch.kubernetes.io/job-name");
    });
    let pod = mutate(&policy, &pod_review);
    assert!(
        pod.allowed(),
        "a pod is never denied: its controller would retry forever"
    );
    let c = &pod.object["spec"]["containers"][0];
    for name in PYTORCH_ENV {
        assert!(env_values(c, name).is_empty(), "{name}");
    }
    assert!(
        pod.warnings()
            .iter()
            .any(|w| w.contains("no Job name label")),
        "{:?}",
        pod.warnings()
    );
}

// ---------------------------------------------------------------------------------------
// Only PyTorch workloads get PyTorch env.
// ---------------------------------------------------------------------------------------

fn mpi_job(job: &mut Value) {
    job["spec"]["plugins"] =
        json!({"mpi": ["--master=master", "--worker=worker", "--port=22"], "ssh": [], "svc": []});
}

#[test]
fn pods_of_a_volcano_job_without_the_pytorch_plugin_get_no_pytorch_env() {
    let policy = Policy::embedded_default();
    let job_review = recorded("create-vcjob-wandb-job-run42.json", mpi_job);
    let job = mutate(&policy, &job_review);
    for t in 0..2 {
        let template = &job.object["spec"]["tasks"][t]["template"];
        assert_eq!(
            template["metadata"]["annotations"]["launchgate.io/pytorch-rank-offset"],
            "none"
        );
        for name in PYTORCH_ENV {
            assert!(env_values(&template["spec"]["containers"][0], name).is_empty());
        }
    }
    // The MPI job's pods (task names master/worker, like PyTorch's defaults), offline.
    for (file, task) in [
        ("create-pod-wandb-job-run42-master-0.json", 0),
        ("create-pod-wandb-job-run42-worker-1.json", 1),
    ] {
        let pod_review = recorded(file, |pod| {
            copy_template_metadata(pod, &job.object["spec"]["tasks"][task]["template"]);
        });
        let pod = mutate(&policy, &pod_review);
        let c = &pod.object["spec"]["containers"][0];
        for name in PYTORCH_ENV {
            assert!(env_values(c, name).is_empty(), "{file}: {name}");
        }
        assert!(c.get("ports").is_none(), "{file}");
    }
}

#[test]
fn pods_of_an_unseen_mpi_job_get_no_pytorch_env_offline() {
    // The Job was never admitted by launchgate (no record), and there is no cluster view; the
    // MPI plugin's MPI_HOST on the pod says it is not PyTorch.
    let pod_review = recorded("create-pod-wandb-job-run42-worker-0.json", |pod| {
        pod["spec"]["containers"][0]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "MPI_HOST", "value": "wandb-job-run42-master-0.wandb-job-run42"}));
    });
    let pod = mutate(&Policy::embedded_default(), &pod_review);
    let c = &pod.object["spec"]["containers"][0];
    for name in PYTORCH_ENV {
        assert!(env_values(c, name).is_empty(), "{name}");
    }
}

// ---------------------------------------------------------------------------------------
// The cache is writable where the env points.
// ---------------------------------------------------------------------------------------

#[test]
fn cache_env_never_points_into_a_read_only_mount_of_the_claim() {
    let review_json = recorded("create-job-demo.json", |job| {
        let spec = &mut job["spec"]["template"]["spec"];
        spec["volumes"] = json!([{"name": "datasets", "persistentVolumeClaim": {"claimName": "nfs-pvc", "readOnly": true}}]);
        spec["containers"][0]["volumeMounts"] =
            json!([{"name": "datasets", "mountPath": "/datasets", "readOnly": true}]);
    });
    let a = mutate(&Policy::embedded_default(), &review_json);
    let spec = &a.object["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    for name in ["XDG_CACHE_HOME", "HF_HOME", "TORCH_HOME"] {
        let value = seen(c, name).unwrap();
        assert!(value.starts_with("/root/.cache"), "{name}={value}");
    }
    let cache_mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/root/.cache")
        .unwrap();
    assert_ne!(cache_mount["readOnly"], true);
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == cache_mount["name"])
        .unwrap();
    assert_ne!(volume["persistentVolumeClaim"]["readOnly"], true);
}

#[test]
fn windows_pods_get_no_linux_cache_or_security_context() {
    let review_json = recorded("create-job-demo.json", |job| {
        job["spec"]["template"]["spec"]["os"] = json!({"name": "windows"});
    });
    let a = mutate(&Policy::embedded_default(), &review_json);
    let spec = &a.object["spec"]["template"]["spec"];
    assert!(spec.get("volumes").is_none(), "{spec}");
    assert!(spec["containers"][0].get("env").is_none());
    assert!(spec["containers"][0].get("securityContext").is_none());
}

// ---------------------------------------------------------------------------------------
// Each default is one the owning operator keeps.
// ---------------------------------------------------------------------------------------

#[test]
fn volcano_max_retry_is_one_volcano_keeps() {
    let policy = Policy::embedded_default();
    // Volcano's webhook replaces maxRetry 0 with 3: launchgate writes 1 (no restarts), and
    // treats a Job's own 0 as unset, as Volcano does.
    for max_retry in [None, Some(0)] {
        let review_json = recorded("create-vcjob-wandb-job-run42.json", |job| {
            if let Some(r) = max_retry {
                job["spec"]["maxRetry"] = json!(r);
            }
        });
        let a = mutate(&policy, &review_json);
        assert_eq!(a.object["spec"]["maxRetry"], 1, "{max_retry:?}");
    }
    let err = Policy::from_yaml("queues:\n  q:\n    jobDefaults: {volcanoMaxRetry: 0}\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("volcanoMaxRetry") && err.contains("3"),
        "{err}"
    );
}

#[test]
fn pytorchjob_nproc_per_node_replaces_the_operators_auto_default() {
    let policy = policy_with("pytorch: {nprocPerNode: 4}");
    // The training operator's webhook ran first and wrote its default "auto".
    let review_json = recorded("create-pytorchjob-run42-pytorch-job.json", |job| {
        job["spec"]["nprocPerNode"] = json!("auto");
    });
    let a = mutate(&policy, &review_json);
    assert_eq!(a.object["spec"]["nprocPerNode"], "4");
}

#[test]
fn indexed_job_with_api_defaulted_parallelism_runs_all_ranks_at_once() {
    let policy = indexed_pytorch_queue();
    // `kubectl apply` of completions: 3 without parallelism: the API server stored 1 (the
    // recorded last-applied configuration has parallelism; drop it as the user left it out).
    let review_json = recorded("create-job-ddp.json", |job| {
        job["spec"]["parallelism"] = json!(1);
        let key = "kubectl.kubernetes.io/last-applied-configuration";
        let mut applied: Value =
            serde_json::from_str(job["metadata"]["annotations"][key].as_str().unwrap()).unwrap();
        applied["spec"]
            .as_object_mut()
            .unwrap()
            .remove("parallelism");
        job["metadata"]["annotations"][key] = json!(applied.to_string());
    });
    let a = mutate(&policy, &review_json);
    assert_eq!(a.object["spec"]["parallelism"], 3);
    assert!(validate(&policy, &review_json).allowed());
}
