//! batch/v1 Indexed Jobs and Kubeflow PyTorchJobs through the pure core.
//!
//! * the recorded Indexed Job `ddp` ends with WORLD_SIZE=3, MASTER_ADDR=ddp-0.ddp and a RANK
//!   fieldRef, and its controller-made pods (only `generateName`) need no further patch;
//! * opt-in by queue or annotation; Jobs that can never rendezvous are denied or warned about;
//! * PyTorchJobs: nothing the operator sets is duplicated.

mod common;

use common::{
    env_entry, env_value, fixture_request, indexed_pytorch_queue, mutated, pytorch_only, synthetic,
};
use launchgate::Policy;
use launchgate::admission::AdmissionRequest;
use launchgate::cluster::NoCluster;
use launchgate::review::{Decision, Endpoint, decide};
use serde_json::{Value, json};

fn run(policy: &Policy, endpoint: Endpoint, request: &AdmissionRequest) -> Decision {
    decide(policy, endpoint, request, &NoCluster)
}

const INDEX_FIELD: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

#[test]
fn recorded_indexed_job_ddp_is_wired_at_job_level() {
    let policy = indexed_pytorch_queue();
    let (job, d) = mutated(&policy, &fixture_request("create-job-ddp.json"), &NoCluster);
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(env_value(c, "WORLD_SIZE"), Some("3"));
    assert_eq!(env_value(c, "MASTER_ADDR"), Some("ddp-0.ddp"));
    assert_eq!(env_value(c, "MASTER_PORT"), Some("23456"));
    assert_eq!(env_value(c, "PET_NNODES"), Some("3"));
    assert_eq!(env_value(c, "PET_MASTER_ADDR"), Some("ddp-0.ddp"));
    for rank in ["RANK", "PET_NODE_RANK"] {
        assert_eq!(
            env_entry(c, rank).unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
            INDEX_FIELD,
            "{rank}"
        );
    }
    assert_eq!(
        c["ports"],
        json!([{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}])
    );
    assert!(
        d.response.warnings.iter().all(|w| !w.contains("PyTorch")),
        "{:?}",
        d.response.warnings
    );
    // Idempotent.
    let mut again = fixture_request("create-job-ddp.json");
    again.object = Some(job.clone());
    assert!(run(&policy, Endpoint::Mutate, &again).patch.0.is_empty());
    // And the validating webhook admits it.
    assert!(
        run(
            &policy,
            Endpoint::Validate,
            &fixture_request("create-job-ddp.json")
        )
        .response
        .allowed
    );
}

/// The Job controller copies the template into each pod and adds hostname, the completion
/// index label/annotation and JOB_COMPLETION_INDEX; the pod has only a generateName.
fn controller_pod(template: &Value, recorded_pod: &Value) -> Value {
    let mut pod = recorded_pod.clone();
    let mut spec = template["spec"].clone();
    for key in ["hostname", "subdomain"] {
        spec[key] = recorded_pod["spec"][key].clone();
    }
    let recorded_env = recorded_pod["spec"]["containers"][0]["env"].clone();
    let env = spec["containers"][0]["env"].as_array_mut().unwrap();
    for e in recorded_env.as_array().unwrap() {
        env.push(e.clone());
    }
    pod["spec"] = spec;
    for (k, v) in template["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
    {
        pod["metadata"]["labels"][k] = v.clone();
    }
    pod
}

#[test]
fn ddp_pods_inherit_the_wiring_and_need_no_further_pytorch_patch() {
    let policy = indexed_pytorch_queue();
    let (job, _) = mutated(&policy, &fixture_request("create-job-ddp.json"), &NoCluster);
    for name in [
        "create-pod-ddp-0.json",
        "create-pod-ddp-1.json",
        "create-pod-ddp-2.json",
    ] {
        let mut request = fixture_request(name);
        assert!(request.name.is_empty(), "{name}: generateName only");
        let pod = controller_pod(&job["spec"]["template"], request.object.as_ref().unwrap());
        request.object = Some(pod.clone());
        let d = run(&policy, Endpoint::Mutate, &request);
        for op in &d.patch.0 {
            let path = serde_json::to_value(op).unwrap()["path"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(
                !path.contains("/env") && !path.contains("/ports"),
                "{name}: pod patched at {path}"
            );
        }
        let c = &pod["spec"]["containers"][0];
        assert_eq!(env_value(c, "MASTER_ADDR"), Some("ddp-0.ddp"), "{name}");
        assert!(env_entry(c, "RANK").is_some(), "{name}");
    }
    // The recorded pods as they are (their Job was never mutated): pods of an Indexed Job
    // carry no completions count, so launchgate does not guess.
    let d = run(
        &policy,
        Endpoint::Mutate,
        &fixture_request("create-pod-ddp-1.json"),
    );
    let mut pod = fixture_request("create-pod-ddp-1.json").object.unwrap();
    json_patch::patch(&mut pod, &d.patch).unwrap();
    assert!(env_entry(&pod["spec"]["containers"][0], "WORLD_SIZE").is_none());
}

fn indexed_job(annotations: Value, spec_patch: Value) -> AdmissionRequest {
    let mut spec = json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2,
        "template": {"spec": {"subdomain": "svc", "restartPolicy": "Never",
                              "containers": [{"name": "trainer", "image": "t:1"}]}}});
    for (k, v) in spec_patch.as_object().unwrap() {
        if v.is_null() {
            spec.as_object_mut().unwrap().remove(k);
        } else {
            spec[k] = v.clone();
        }
    }
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "wandb", "labels": {"launchgate.io/queue": "q"},
                     "annotations": annotations},
        "spec": spec});
    synthetic(job)
}

#[test]
fn opt_in_by_annotation_and_opt_out() {
    let off = pytorch_only("{indexedJobs: false}");
    let (job, _) = mutated(&off, &indexed_job(json!({}), json!({})), &NoCluster);
    assert!(env_entry(&job["spec"]["template"]["spec"]["containers"][0], "RANK").is_none());
    let (job, _) = mutated(
        &off,
        &indexed_job(json!({"launchgate.io/pytorch": "true"}), json!({})),
        &NoCluster,
    );
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(env_value(c, "MASTER_ADDR"), Some("train-0.svc"));
    assert_eq!(env_value(c, "WORLD_SIZE"), Some("2"));
    let on = pytorch_only("{indexedJobs: true, port: 29500}");
    let (job, _) = mutated(
        &on,
        &indexed_job(json!({"launchgate.io/pytorch": "false"}), json!({})),
        &NoCluster,
    );
    assert!(env_entry(&job["spec"]["template"]["spec"]["containers"][0], "RANK").is_none());
    let (job, _) = mutated(&on, &indexed_job(json!({}), json!({})), &NoCluster);
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(env_value(c, "MASTER_PORT"), Some("29500"));
    assert_eq!(c["ports"][0]["containerPort"], 29500);
}

#[test]
fn jobs_that_can_never_rendezvous_are_denied_or_warned() {
    let cases = [
        (
            json!({"launchgate.io/pytorch": "true"}),
            json!({"completionMode": "NonIndexed"}),
            "not an Indexed Job",
        ),
        (
            // Written by the user (an API-defaulted 1 would become completions).
            json!({"kubectl.kubernetes.io/last-applied-configuration": r#"{"spec":{"parallelism":1}}"#}),
            json!({"parallelism": 1}),
            "spec.parallelism 1 < spec.completions 2",
        ),
        (
            json!({}),
            json!({"template": {"spec": {"containers": [{"name": "trainer"}]}}}),
            "subdomain is not set",
        ),
        (
            json!({}),
            json!({"completions": null}),
            "spec.completions must be set",
        ),
    ];
    let deny = pytorch_only("{indexedJobs: true}");
    let warn = pytorch_only("{indexedJobs: true, onUnwirable: warn}");
    for (annotations, spec, message) in cases {
        let request = indexed_job(annotations, spec);
        let d = run(&deny, Endpoint::Validate, &request);
        assert!(!d.response.allowed, "{message}");
        let status = d.response.status.unwrap().message;
        assert!(status.contains(message), "{status}");
        assert!(
            run(&warn, Endpoint::Validate, &request).response.allowed,
            "{message}"
        );
        let (job, d) = mutated(&warn, &request, &NoCluster);
        assert!(
            d.response.warnings.iter().any(|w| w.contains(message)),
            "{message}: {:?}",
            d.response.warnings
        );
        assert!(
            env_entry(
                &job["spec"]["template"]["spec"]["containers"][0],
                "WORLD_SIZE"
            )
            .is_none(),
            "{message}: left unwired"
        );
    }
    // Queue-level opt-in leaves ordinary (non-Indexed) Jobs alone and admits them.
    let request = indexed_job(
        json!({}),
        json!({"completionMode": null, "completions": null}),
    );
    assert!(run(&deny, Endpoint::Validate, &request).response.allowed);
    let (_, d) = mutated(&deny, &request, &NoCluster);
    assert!(d.response.warnings.iter().all(|w| !w.contains("PyTorch")));
}

#[test]
fn generate_name_job_is_not_half_wired_and_records_the_decision() {
    let policy = pytorch_only("{indexedJobs: true}");
    let mut request = indexed_job(json!({}), json!({}));
    request.name.clear();
    let object = request.object.as_mut().unwrap();
    object["metadata"].as_object_mut().unwrap().remove("name");
    object["metadata"]["generateName"] = json!("train-");
    let (job, _) = mutated(&policy, &request, &NoCluster);
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    for name in ["MASTER_ADDR", "WORLD_SIZE", "RANK", "PET_NNODES"] {
        assert!(env_entry(c, name).is_none(), "{name} must wait for the pod");
    }
    let record: Value = serde_json::from_str(
        job["spec"]["template"]["metadata"]["annotations"]["launchgate.io/pytorch-wiring"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(record["masterAddr"], "{job}-0.svc");
    assert_eq!(record["nnodes"], 2);
}

#[test]
fn wait_for_master_on_a_shared_template_skips_rank_zero() {
    let policy = pytorch_only(
        "{indexedJobs: true, waitForMaster: {enabled: true, image: 'busybox:1.36.1', timeoutSeconds: 120}}",
    );
    let (job, _) = mutated(&policy, &indexed_job(json!({}), json!({})), &NoCluster);
    let init = &job["spec"]["template"]["spec"]["initContainers"][0];
    assert_eq!(init["name"], "wait-for-master");
    assert_eq!(env_value(init, "MASTER_ADDR"), Some("train-0.svc"));
    assert_eq!(env_value(init, "WAIT_TIMEOUT_SECONDS"), Some("120"));
    assert_eq!(
        env_entry(init, "NODE_RANK").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
        INDEX_FIELD
    );
    let script = init["command"][2].as_str().unwrap();
    assert!(script.contains("\"${NODE_RANK:-}\" = \"0\""), "{script}");
    assert!(script.contains("nc -z"), "TCP check, not DNS: {script}");
}

// ---------------------------------------------------------------------------------------------
// PyTorchJob

#[test]
fn recorded_pytorchjob_gets_no_duplicated_operator_env() {
    let policy = Policy::embedded_default();
    let (job, d) = mutated(
        &policy,
        &fixture_request("create-pytorchjob-run42-pytorch-job.json"),
        &NoCluster,
    );
    for rt in ["Master", "Worker"] {
        let c = &job["spec"]["pytorchReplicaSpecs"][rt]["template"]["spec"]["containers"][0];
        for name in [
            "MASTER_ADDR",
            "MASTER_PORT",
            "WORLD_SIZE",
            "RANK",
            "PET_NNODES",
            "PET_NODE_RANK",
        ] {
            assert!(
                env_entry(c, name).is_none(),
                "{rt}: {name} is the operator's"
            );
        }
        assert!(
            c.get("ports").is_none(),
            "{rt}: the operator defaults the port"
        );
    }
    assert!(
        d.response
            .warnings
            .iter()
            .all(|w| !(w.contains("PyTorch wiring") || w.contains("operator appends"))),
        "{:?}",
        d.response.warnings
    );
}

#[test]
fn pytorchjob_gets_nproc_and_wait_for_master_and_warnings_about_shadowed_env() {
    let policy =
        pytorch_only("{nprocPerNode: 4, waitForMaster: {enabled: true, timeoutSeconds: 30}}");
    let mut request = fixture_request("create-pytorchjob-run42-pytorch-job.json");
    let obj = request.object.as_mut().unwrap();
    obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "MASTER_ADDR", "value": "localhost"}]);
    let (job, d) = mutated(&policy, &request, &NoCluster);
    assert_eq!(job["spec"]["nprocPerNode"], "4");
    let worker = &job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"];
    assert_eq!(worker["initContainers"][0]["name"], "wait-for-master");
    assert_eq!(
        env_value(&worker["initContainers"][0], "MASTER_ADDR"),
        Some("run42-pytorch-job-master-0")
    );
    assert!(
        job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
            .get("initContainers")
            .is_none()
    );
    assert!(
        d.response
            .warnings
            .iter()
            .any(|w| w.contains("sets MASTER_ADDR") && w.contains("operator")),
        "{:?}",
        d.response.warnings
    );
    let mut again = request.clone();
    again.object = Some(job);
    assert!(run(&policy, Endpoint::Mutate, &again).patch.0.is_empty());
}

#[test]
fn pytorchjob_with_two_masters_is_denied() {
    let policy = Policy::embedded_default();
    let mut request = fixture_request("create-pytorchjob-run42-pytorch-job.json");
    request.object.as_mut().unwrap()["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] =
        json!(2);
    let d = run(&policy, Endpoint::Validate, &request);
    assert!(!d.response.allowed);
    let message = d.response.status.unwrap().message;
    assert!(message.contains("Master.replicas is 2"), "{message}");
}

#[test]
fn host_network_pods_declare_the_rendezvous_port_once() {
    // hostNetwork: hostPort defaults to containerPort, and a pod may not declare the same host
    // port twice, so only the first training container gets pytorchjob-port.
    let policy = pytorch_only("{indexedJobs: true}");
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "hn", "namespace": "wandb", "labels": {"wandb.ai/monitor": "true", "queue": "q"}},
        "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 6,
                 "template": {"spec": {"subdomain": "hn", "hostNetwork": true, "restartPolicy": "Never",
                     "containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}}}
    });
    let request = synthetic(job);
    let (job, _) = mutated(&policy, &request, &NoCluster);
    let containers = job["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(
        containers[0]["ports"],
        json!([{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}])
    );
    assert!(containers[1].get("ports").is_none(), "{:?}", containers[1]);
    for c in containers {
        assert_eq!(
            env_value(c, "MASTER_PORT"),
            Some("23456"),
            "both get the env"
        );
    }
    // Reinvocation: nothing more.
    let again = synthetic(job.clone());
    assert!(run(&policy, Endpoint::Mutate, &again).patch.0.is_empty());
    // The result is a valid pod template for the API server: no duplicate host ports.
    let spec: k8s_openapi::api::core::v1::PodSpec =
        serde_json::from_value(job["spec"]["template"]["spec"].clone()).unwrap();
    let declared: usize = spec
        .containers
        .iter()
        .map(|c| c.ports.as_ref().map_or(0, Vec::len))
        .sum();
    assert_eq!(declared, 1);
}

/// The built-in policy treats an Indexed Job as distributed training only on positive evidence:
/// a sharded evaluation (64 shards, one at a time, `parallelism: 1` written by the user) is
/// neither rewritten to 64 pods at once nor denied as "can never rendezvous"; the same Job
/// started with torchrun is wired, and its explicit parallelism is still never changed.
#[test]
fn the_default_policy_leaves_a_sharded_evaluation_alone() {
    let policy = Policy::embedded_default();
    let eval = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "eval", "namespace": "wandb", "labels": {"wandb.ai/monitor": "true", "queue": "gpu-queue"}},
        "spec": {"completionMode": "Indexed", "completions": 64, "parallelism": 1,
            "template": {"spec": {"restartPolicy": "Never", "subdomain": "eval",
                "containers": [{"name": "eval", "image": "acme/eval:1",
                    "command": ["python", "eval.py"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}});
    let request = synthetic(eval.clone());
    let (job, d) = mutated(&policy, &request, &NoCluster);
    assert_eq!(job["spec"]["parallelism"], 1);
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert!(env_entry(c, "WORLD_SIZE").is_none(), "{c}");
    assert!(d.response.warnings.is_empty(), "{:?}", d.response.warnings);
    assert!(run(&policy, Endpoint::Validate, &request).response.allowed);

    let mut ddp = eval;
    ddp["spec"]["template"]["spec"]["containers"][0]["command"] =
        json!(["torchrun", "--nnodes=64", "train.py"]);
    let request = synthetic(ddp);
    let (job, d) = mutated(&policy, &request, &NoCluster);
    assert_eq!(
        job["spec"]["parallelism"], 1,
        "never the user's parallelism"
    );
    assert!(
        d.response
            .warnings
            .iter()
            .any(|w| w.contains("set spec.parallelism: 64")),
        "{:?}",
        d.response.warnings
    );
    let v = run(&policy, Endpoint::Validate, &request);
    assert!(
        !v.response.allowed,
        "a torchrun job that can never rendezvous is denied"
    );
}
