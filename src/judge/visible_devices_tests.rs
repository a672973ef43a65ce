//! No GPU by environment: a container that asks for no GPU — by the accelerator map and its
//! DRA claims, as the consumption model counts — is stored with `NVIDIA_VISIBLE_DEVICES=void`,
//! and a tenant's own value of the variable is denied, in a container with GPUs too (it would
//! replace the device plugin's list of them), on every path a container comes in by.

use crate::admission::{AdmissionRequest, Operation};
use crate::cluster::{ClusterView, NoCluster, StaticCluster};
use crate::judge::{Judgement, judge};
use crate::mutate::visible_devices::{NO_GPU, VARIABLE};
use crate::policy::Policy;
use crate::workload::effective_env_value;
use serde_json::{Value, json};

/// The example policy (queue `gpu-queue`: at most 4 GPUs a container, limits denying), with
/// `edit` applied to the queue.
fn policy(edit: impl FnOnce(&mut Value)) -> Policy {
    let mut config: Value =
        serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).expect("built-in config");
    edit(&mut config["queues"]["gpu-queue"]);
    Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).expect("policy")
}

/// A Job of 16 pods, each pod spec `spec`.
fn job(spec: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "probe", "namespace": "wandb",
                     "labels": {"wandb.ai/monitor": "true"}},
        "spec": {"parallelism": 16, "completions": 16,
                 "template": {"spec": spec}}})
}

/// A pod spec of one container `main` (NVIDIA's CUDA image, which sets the variable `all`
/// itself) with `resources` and `env`.
fn main(resources: Value, env: Value) -> Value {
    json!({"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
         "resources": resources, "env": env}]})
}

fn judged(policy: &Policy, object: Value, cluster: &dyn ClusterView) -> Judgement {
    let request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
    judge(policy, &request, cluster)
}

/// The variable as the kubelet will give it to the first container of the stored Job.
fn stored(j: &Judgement) -> Option<String> {
    let c = j
        .mutated
        .as_ref()?
        .pointer("/spec/template/spec/containers/0")?;
    effective_env_value(c.as_object()?, VARIABLE).map(str::to_string)
}

const CPU_ONLY: &str = r#"{"limits": {"cpu": "2", "memory": "4Gi"}}"#;

fn cpu_only() -> Value {
    serde_json::from_str(CPU_ONLY).unwrap()
}

#[test]
fn a_job_that_asks_for_no_gpu_cannot_see_every_gpu_by_environment() {
    let p = policy(|_| {});
    // 16 pods asking for no GPU, each setting NVIDIA_VISIBLE_DEVICES=all.
    let all = job(main(
        cpu_only(),
        json!([{"name": VARIABLE, "value": "all"}]),
    ));
    let j = judged(&p, all, &NoCluster);
    assert!(!j.allowed(), "a pod of no GPU that sets all was admitted");
    assert_eq!(j.denied_rules(), ["visibleDevices.tenantValue"]);
    let message = j.message();
    assert!(
        message.contains(r#"queue "gpu-queue": spec.template.spec.containers[0] (main) asks for no GPU but sets NVIDIA_VISIBLE_DEVICES="all""#),
        "{message}"
    );
    // The same Job without the variable: stored with void, which overrides the image's `all`.
    let j = judged(&p, job(main(cpu_only(), json!([]))), &NoCluster);
    assert!(j.allowed(), "{}", j.message());
    assert_eq!(stored(&j).as_deref(), Some(NO_GPU));
    // A second pass over what was stored patches nothing.
    let again = judged(&p, j.mutated.clone().unwrap(), &NoCluster);
    assert!(again.allowed());
    assert!(
        again.mutation.patch.0.is_empty(),
        "{:?}",
        again.mutation.patch
    );
    // A tenant's `void` is no violation.
    let void = job(main(
        cpu_only(),
        json!([{"name": VARIABLE, "value": NO_GPU}]),
    ));
    assert!(judged(&p, void, &NoCluster).allowed());
    // The last entry of the name is the one the kubelet uses: `all` after `void` is denied.
    let last = job(main(
        cpu_only(),
        json!([{"name": VARIABLE, "value": NO_GPU}, {"name": VARIABLE, "value": "all"}]),
    ));
    let j = judged(&p, last, &NoCluster);
    assert_eq!(j.denied_rules(), ["visibleDevices.tenantValue"]);
    let found: Vec<_> = j.violations().filter_map(|v| v.path.as_deref()).collect();
    assert_eq!(found, ["spec.template.spec.containers[0].env[1]"]);
    // A value launchgate cannot read (a ConfigMap key through valueFrom) is denied too.
    let from = job(main(
        cpu_only(),
        json!([{"name": VARIABLE, "valueFrom": {"configMapKeyRef": {"name": "gpu", "key": "devices"}}}]),
    ));
    let j = judged(&p, from, &NoCluster);
    assert!(
        j.message()
            .contains("from valueFrom (launchgate cannot read it)"),
        "{}",
        j.message()
    );
    // envFrom may carry the variable: the env entry launchgate writes wins over it.
    let mut env_from = main(cpu_only(), json!([]));
    env_from["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "gpu-settings"}}]);
    let j = judged(&p, job(env_from), &NoCluster);
    assert!(j.allowed(), "{}", j.message());
    assert_eq!(stored(&j).as_deref(), Some(NO_GPU));
}

#[test]
fn a_container_with_gpus_keeps_the_device_plugins_list() {
    let p = policy(|_| {});
    let one = || json!({"limits": {"nvidia.com/gpu": 1, "cpu": "2", "memory": "4Gi"}});
    // Untouched: the device plugin names its GPU.
    let j = judged(&p, job(main(one(), json!([]))), &NoCluster);
    assert!(j.allowed(), "{}", j.message());
    assert_eq!(stored(&j), None);
    // `all` would replace the device plugin's list of the one GPU it allocated.
    let j = judged(
        &p,
        job(main(one(), json!([{"name": VARIABLE, "value": "all"}]))),
        &NoCluster,
    );
    assert_eq!(j.denied_rules(), ["visibleDevices.tenantValue"]);
    assert!(
        j.message().contains("which would replace the device plugin's list of the GPUs allocated to it (nvidia.com/gpu: 1)"),
        "{}",
        j.message()
    );
    // A MIG slice is a GPU by the map: left to the device plugin.
    let slice = json!({"limits": {"nvidia.com/mig-1g.10gb": 1, "cpu": "2", "memory": "4Gi"}});
    let j = judged(&p, job(main(slice, json!([]))), &NoCluster);
    assert_eq!(stored(&j), None);
}

/// A ResourceClaimTemplate in `wandb` of `count` devices of `class`.
fn claim_template(name: &str, class: &str, count: i64) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "wandb"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "dev", "exactly": {"deviceClassName": class, "count": count}}]}}}})
}

/// A pod spec whose container `main` uses the claim made from `template`, beside a container
/// `side` that uses none.
fn claiming(template: &str) -> Value {
    json!({"restartPolicy": "Never",
        "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
        "containers": [
            {"name": "main", "image": "acme/train:1",
             "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "claims": [{"name": "dev"}]}},
            {"name": "side", "image": "acme/side:1", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]})
}

#[test]
fn a_claims_devices_count_as_the_model_counts_them() {
    let p = policy(|_| {});
    let cluster = StaticCluster::default()
        .with_dra_object(claim_template("one-gpu", "gpu.nvidia.com", 1))
        .with_dra_object(claim_template(
            "channel",
            "compute-domain-default-channel.nvidia.com",
            1,
        ));
    let container = |j: &Judgement, i: usize| {
        let c = j
            .mutated
            .as_ref()
            .and_then(|o| o.pointer(&format!("/spec/template/spec/containers/{i}")))
            .and_then(Value::as_object)
            .cloned()
            .unwrap();
        effective_env_value(&c, VARIABLE).map(str::to_string)
    };
    // A claim of a GPU: its container is the driver's to name; the other gets void.
    let j = judged(&p, job(claiming("one-gpu")), &cluster);
    assert!(j.allowed(), "{}", j.message());
    assert_eq!(
        (container(&j, 0), container(&j, 1).as_deref()),
        (None, Some(NO_GPU))
    );
    // A ComputeDomain channel counts as no GPU: both get void.
    let j = judged(&p, job(claiming("channel")), &cluster);
    assert_eq!(container(&j, 0).as_deref(), Some(NO_GPU));
    // A claim that is not there cannot be counted (and is denied where GPUs are limited):
    // its container is not written, which could hide a GPU it gets.
    let j = judged(&p, job(claiming("missing")), &cluster);
    assert_eq!(j.denied_rules(), ["accelerators.uncounted"]);
    assert_eq!(
        (container(&j, 0), container(&j, 1).as_deref()),
        (None, Some(NO_GPU))
    );
}

#[test]
fn a_debug_container_asks_for_no_gpu() {
    let p = policy(|_| {});
    let running = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "wandb",
                     "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "gpu-queue"}},
        "spec": {"containers": [{"name": "main", "image": "acme/train:1",
            "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "2", "memory": "4Gi"}},
            "env": []}]}});
    let debug = |env: Value| {
        let mut object = running.clone();
        object["spec"]["ephemeralContainers"] = json!([{"name": "debugger", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "env": env}]);
        let mut request = AdmissionRequest::synthetic_create(object, None).unwrap();
        request.operation = Operation::Update;
        request.sub_resource = Some("ephemeralcontainers".into());
        request.old_object = Some(running.clone());
        judge(&p, &request, &NoCluster)
    };
    let j = debug(json!([]));
    assert!(j.allowed(), "{}", j.message());
    let debugger = j.mutated.as_ref().unwrap()["spec"]["ephemeralContainers"][0]
        .as_object()
        .cloned()
        .unwrap();
    assert_eq!(effective_env_value(&debugger, VARIABLE), Some(NO_GPU));
    let j = debug(json!([{"name": VARIABLE, "value": "all"}]));
    assert_eq!(j.denied_rules(), ["visibleDevices.tenantValue"]);
    assert!(
        j.message().contains("spec.ephemeralContainers[0] (debugger) asks for no GPU but sets NVIDIA_VISIBLE_DEVICES=\"all\""),
        "{}",
        j.message()
    );
}

#[test]
fn the_queue_decides_how_the_rule_answers_and_an_exemption_covers_it() {
    let all = || {
        job(main(
            cpu_only(),
            json!([{"name": VARIABLE, "value": "all"}]),
        ))
    };
    // Limits that warn: admitted, with the violation as a warning.
    let warn = policy(|q| q["limits"]["enforcement"] = json!("warn"));
    let j = judged(&warn, all(), &NoCluster);
    assert!(j.allowed());
    assert!(
        j.warnings()
            .iter()
            .any(|w| w.rule == "visibleDevices.tenantValue"),
        "{:?}",
        j.warnings()
    );
    // Turned off: nothing written, nothing judged.
    let off = policy(|q| q["visibleDevices"] = json!({"enabled": false}));
    assert!(judged(&off, all(), &NoCluster).allowed());
    let j = judged(&off, job(main(cpu_only(), json!([]))), &NoCluster);
    assert_eq!(stored(&j), None);
    // A requester the queue exempts is left alone, as on every rule.
    let exempt = policy(|q| {
        q["exemptions"] = json!([{"name": "platform", "groups": ["platform-team"]}]);
    });
    let mut request = AdmissionRequest::synthetic_create(all(), Some("wandb")).unwrap();
    request.user_info = Some(json!({"username": "ops", "groups": ["platform-team"]}));
    let j = judge(&exempt, &request, &NoCluster);
    assert!(j.allowed(), "{}", j.message());
    assert_eq!(j.mutation.summary.exempted_by.as_deref(), Some("platform"));
    assert_eq!(stored(&j).as_deref(), Some("all"));
}

#[test]
fn an_update_carries_only_what_was_admitted_before() {
    let p = policy(|_| {});
    // A Job stored before the rule, with `all` in its pod template (a suspended Job Kueue
    // admits by an UPDATE): the UPDATE passes, with the violation as a warning.
    let mut before = job(main(
        cpu_only(),
        json!([{"name": VARIABLE, "value": "all"}]),
    ));
    before["metadata"]["labels"]["launchgate.io/queue"] = json!("gpu-queue");
    let update = |old: &Value, new: Value| {
        let mut request = AdmissionRequest::synthetic_create(new, Some("wandb")).unwrap();
        request.operation = Operation::Update;
        request.old_object = Some(old.clone());
        judge(&p, &request, &NoCluster)
    };
    let mut unsuspended = before.clone();
    unsuspended["spec"]["suspend"] = json!(false);
    let j = update(&before, unsuspended);
    assert!(j.allowed(), "{}", j.message());
    let carried: Vec<_> = j.violations().collect();
    assert!(carried.is_empty(), "{carried:?}");
    let unchanged = &j.validation.as_ref().unwrap().summary.unchanged;
    assert_eq!(unchanged.len(), 1, "{unchanged:?}");
    assert!(unchanged[0].message.ends_with(
        "already so before this update; allowed because this update does not make it worse)"
    ));
    // An UPDATE that adds the value where the old object had none is denied.
    let mut clean = before.clone();
    clean["spec"]["template"]["spec"]["containers"][0]["env"] = json!([]);
    let j = update(&clean, before.clone());
    assert_eq!(j.denied_rules(), ["visibleDevices.tenantValue"]);
}
