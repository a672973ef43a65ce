//! A GPU is counted however it is asked for: by the accelerator map, through DRA claims (their
//! templates and shared claims read from the cluster view, or given offline), MIG slices and
//! other vendors' names, and pod-level resources — by every limit that reads GPUs.

use crate::admission::AdmissionRequest;
use crate::cluster::{ClusterView, GivenObjects, NoCluster, StaticCluster};
use crate::judge::{Judgement, judge};
use crate::policy::Policy;
use serde_json::{Value, json};

/// A queue `q` with a 4-GPU most per container, 16 GPUs per run and 64 GPU-hours per run, and
/// `extra` (YAML at the top level).
fn policy(extra: &str) -> Policy {
    Policy::from_yaml(&format!(
        r#"
queues:
  q:
    limits:
      template: |
        spec:
          template:
            spec:
              containers:
                - resources: {{limits: {{nvidia.com/gpu: "{{{{gpus}}}}", cpu: "{{{{cpus}}}}", memory: "{{{{memory}}}}"}}}}
      variables:
        gpus: {{type: integer, maximum: 4}}
        cpus: {{type: quantity, maximum: "8"}}
        memory: {{type: quantity, maximum: 64Gi}}
      totals: {{nvidia.com/gpu: {{maximum: 16}}}}
    guardrails:
      costCeiling: {{maxGpuHours: 64}}
{extra}"#
    ))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A Job of queue `q`: `pods` pods at once for one hour, each pod spec `spec`.
fn job(pods: i64, spec: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "wandb",
                     "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "q"}},
        "spec": {"parallelism": pods, "completions": pods, "activeDeadlineSeconds": 3600,
                 "template": {"spec": spec}}})
}

/// A container `main` with `resources`.
fn container(resources: Value) -> Value {
    json!({"name": "main", "image": "acme/train:1", "resources": resources})
}

/// A pod spec whose container uses the claim `gpus` made from the ResourceClaimTemplate
/// `template`.
fn claiming(template: &str) -> Value {
    json!({"restartPolicy": "Never",
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
        "containers": [container(json!({"claims": [{"name": "gpus"}]}))]})
}

/// A ResourceClaimTemplate in `wandb` whose one request asks for `exactly`.
fn claim_template(name: &str, exactly: Value) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "wandb"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}})
}

fn judged(policy: &Policy, object: Value, cluster: &dyn ClusterView) -> Judgement {
    let request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
    judge(policy, &request, cluster)
}

/// The rule ids of a judgement's denials, sorted, each once.
fn denied_by(j: &Judgement) -> Vec<String> {
    let mut ids: Vec<String> = j.denied_rules().into_iter().map(str::to_string).collect();
    ids.sort();
    ids.dedup();
    ids
}

#[test]
fn a_job_asking_for_gpus_through_a_claim_template_is_held_to_every_gpu_limit() {
    let eight = claim_template(
        "eight-gpus",
        json!({"deviceClassName": "gpu.nvidia.com", "count": 8}),
    );
    let cluster = StaticCluster::default().with_dra_object(eight);
    let j = judged(&policy(""), job(16, claiming("eight-gpus")), &cluster);
    assert!(!j.allowed(), "16 pods × 8 GPUs through DRA were admitted");
    let message = j.message();
    // The per-container most, naming the claim and its count.
    assert!(
        message.contains(r#"spec.template.spec.containers[0] (main) asks for 8 GPUs (claim "gpus" (ResourceClaimTemplate eight-gpus): 8 × gpu.nvidia.com (8 GPUs)), exceeds maximum 4 (variable "gpus" on nvidia.com/gpu"#),
        "{message}"
    );
    // The total: 16 pods × 8.
    assert!(
        message.contains(r#"total nvidia.com/gpu over all pods=128 exceeds maximum 16 (totals) (spec.template: 16 × 8 (claim "gpus" (ResourceClaimTemplate eight-gpus): 8 × gpu.nvidia.com (8 GPUs per pod)))"#),
        "{message}"
    );
    // The GPU-hour ceiling: 128 GPUs × 1 h.
    assert!(
        message.contains("128 GPUs at once") && message.contains("= 128.00 GPU-hours"),
        "{message}"
    );
    assert_eq!(
        denied_by(&j),
        [
            "guardrails.costCeiling",
            "limits.totals",
            "limits.variables"
        ]
    );
    // One GPU per pod through the same kind of claim fits every limit.
    let one = claim_template("one-gpu", json!({"deviceClassName": "gpu.nvidia.com"}));
    let cluster = StaticCluster::default().with_dra_object(one);
    let j = judged(&policy(""), job(4, claiming("one-gpu")), &cluster);
    assert!(j.allowed(), "{}", j.message());
}

#[test]
fn every_way_of_asking_for_devices_is_counted_at_its_worst_or_refused() {
    // allocationMode: All has no bound unless the map gives one.
    let all = claim_template(
        "all-gpus",
        json!({"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}),
    );
    let cluster = StaticCluster::default().with_dra_object(all);
    let j = judged(&policy(""), job(1, claiming("all-gpus")), &cluster);
    assert!(!j.allowed());
    assert!(
        j.message().contains(r#"asks for every device of DeviceClass "gpu.nvidia.com" (allocationMode: All), which has no bound in the accelerator map (accelerators.deviceClasses.gpu.nvidia.com.allDevicesAtMost)"#),
        "{}",
        j.message()
    );
    assert!(denied_by(&j).contains(&"accelerators.uncounted".to_string()));
    let bounded = policy(
        "accelerators:\n  deviceClasses:\n    gpu.nvidia.com: {gpusPerDevice: 1, allDevicesAtMost: 8}\n",
    );
    let j = judged(&bounded, job(1, claiming("all-gpus")), &cluster);
    assert!(!j.allowed());
    assert!(
        j.message().contains("asks for 8 GPUs") && j.message().contains("all ≤ 8 × gpu.nvidia.com"),
        "{}",
        j.message()
    );
    // firstAvailable: the largest alternative.
    let first = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "any-gpus", "namespace": "wandb"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [
            {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 1},
            {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 8}]}]}}}});
    let cluster = StaticCluster::default().with_dra_object(first);
    let j = judged(&policy(""), job(1, claiming("any-gpus")), &cluster);
    assert!(!j.allowed());
    assert!(j.message().contains("asks for 8 GPUs"), "{}", j.message());
    // A DeviceClass the map does not know, a template that is not there, a claim that
    // cannot be read offline: each refused, saying why.
    let odd = claim_template("odd", json!({"deviceClassName": "fpga.example.com"}));
    let cluster = StaticCluster::default().with_dra_object(odd);
    let j = judged(&policy(""), job(1, claiming("odd")), &cluster);
    assert!(
        j.message().contains(r#"DeviceClass "fpga.example.com", which the accelerator map (accelerators.deviceClasses) does not count"#),
        "{}",
        j.message()
    );
    let j = judged(
        &policy(""),
        job(1, claiming("missing")),
        &StaticCluster::default(),
    );
    assert!(
        j.message().contains(
            r#"claim "gpus" (ResourceClaimTemplate missing) is not in namespace "wandb""#
        ),
        "{}",
        j.message()
    );
    let j = judged(&policy(""), job(1, claiming("eight-gpus")), &NoCluster);
    assert!(!j.allowed());
    assert!(j.message().contains("cannot be read"), "{}", j.message());
    // A class mapped to no GPU (a network interface) counts nothing.
    let nic = policy(
        "accelerators:\n  deviceClasses:\n    gpu.nvidia.com: {gpusPerDevice: 1}\n    nic.example.com: {gpusPerDevice: 0}\n",
    );
    let rdma = claim_template(
        "rdma",
        json!({"deviceClassName": "nic.example.com", "count": 4}),
    );
    let cluster = StaticCluster::default().with_dra_object(rdma);
    let j = judged(&nic, job(1, claiming("rdma")), &cluster);
    assert!(j.allowed(), "{}", j.message());
}

#[test]
fn a_shared_claim_counts_once_per_run_and_whole_for_each_container_that_uses_it() {
    let shared = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "pool", "namespace": "wandb"},
        "spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}]}}});
    let cluster = StaticCluster::default().with_dra_object(shared);
    let spec = json!({"restartPolicy": "Never",
        "resourceClaims": [{"name": "gpus", "resourceClaimName": "pool"}],
        "containers": [container(json!({"claims": [{"name": "gpus"}]}))]});
    let j = judged(&policy(""), job(16, spec), &cluster);
    assert!(!j.allowed());
    let message = j.message();
    assert!(
        message.contains("asks for 8 GPUs") && message.contains("shared with other pods"),
        "{message}"
    );
    // The 8 devices are the run's once, not 16 × 8: within the total of 16.
    assert!(!message.contains("total nvidia.com/gpu"), "{message}");
    assert_eq!(denied_by(&j), ["limits.variables"]);
}

#[test]
fn other_names_for_a_gpu_count_by_the_accelerator_map() {
    // A DeviceClass's extended name (KEP-5004) is its class's devices.
    let by_class = job(
        1,
        json!({"containers": [container(
            json!({"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 8}}),
        )]}),
    );
    let j = judged(&policy(""), by_class, &NoCluster);
    assert!(!j.allowed());
    assert!(
        j.message()
            .contains("asks for 8 GPUs (deviceclass.resource.kubernetes.io/gpu.nvidia.com: 8)"),
        "{}",
        j.message()
    );
    // 16 pods of a whole-GPU MIG slice: 16 GPUs at once, 16 h is over 64 GPU-hours.
    let mut mig = job(
        16,
        json!({"containers": [container(json!({"limits": {"nvidia.com/mig-7g.80gb": 1}}))]}),
    );
    mig["spec"]["activeDeadlineSeconds"] = json!(16 * 3600);
    let j = judged(&policy(""), mig, &NoCluster);
    assert!(!j.allowed());
    assert!(
        j.message().contains("16 GPUs at once") && j.message().contains("= 256.00 GPU-hours"),
        "{}",
        j.message()
    );
    // A 1g slice is a seventh of a GPU (rounded up to a thousandth).
    let slices = job(
        1,
        json!({"containers": [container(json!({"limits": {"nvidia.com/mig-1g.10gb": 7}}))]}),
    );
    let j = judged(&policy(""), slices, &NoCluster);
    assert!(j.allowed(), "{}", j.message());
    // Intel's Xe is a GPU too.
    let mut xe = job(
        16,
        json!({"containers": [container(json!({"limits": {"gpu.intel.com/xe": 1}}))]}),
    );
    xe["spec"]["activeDeadlineSeconds"] = json!(8 * 3600);
    let j = judged(&policy(""), xe, &NoCluster);
    assert!(
        j.message().contains("= 128.00 GPU-hours"),
        "{}",
        j.message()
    );
}

#[test]
fn pod_level_resources_are_held_to_what_one_container_may_have() {
    let big = job(
        1,
        json!({"resources": {"limits": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8}},
               "containers": [container(json!({}))]}),
    );
    let j = judged(&policy(""), big, &NoCluster);
    assert!(!j.allowed());
    let message = j.message();
    for part in [
        "spec.template.spec.resources.limits.cpu=64 exceeds maximum 8",
        "spec.template.spec.resources.limits.memory=512Gi exceeds maximum 64Gi",
        "spec.template.spec.resources.limits[\"nvidia.com/gpu\"]=8 exceeds maximum 4",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    // Pod-level GPUs count in the run's total.
    let many = job(
        4,
        json!({"resources": {"limits": {"nvidia.com/gpu": 4}}, "containers": [container(json!({}))]}),
    );
    let j = judged(&policy(""), many.clone(), &NoCluster);
    assert!(j.allowed(), "{}", j.message());
    let mut more = many;
    more["spec"]["parallelism"] = json!(5);
    more["spec"]["completions"] = json!(5);
    let j = judged(&policy(""), more, &NoCluster);
    assert!(
        j.message()
            .contains("total nvidia.com/gpu over all pods=20 exceeds maximum 16"),
        "{}",
        j.message()
    );
}

#[test]
fn claims_given_offline_count_as_the_cluster_would() {
    let eight = claim_template(
        "eight-gpus",
        json!({"deviceClassName": "gpu.nvidia.com", "count": 8}),
    );
    let mut given = GivenObjects::default();
    given.add(eight.clone(), Some("wandb")).unwrap();
    let offline = judged(&policy(""), job(16, claiming("eight-gpus")), &given);
    let cluster = StaticCluster::default().with_dra_object(eight);
    let online = judged(&policy(""), job(16, claiming("eight-gpus")), &cluster);
    assert_eq!(offline.message(), online.message());
    assert!(!offline.allowed());
}

#[test]
fn the_accelerator_map_is_checked_with_key_paths() {
    let errors = Policy::from_yaml(
        "accelerators:\n  resources:\n    example.com/gpu: lots\n    deviceclass.resource.kubernetes.io/x: 1\n  deviceClasses:\n    gpu.example.com: {gpusPerDevice: -1, allDevicesAtMost: -2}\n",
    )
    .unwrap_err()
    .to_string();
    for key in [
        "accelerators.resources.example.com/gpu",
        "accelerators.resources.deviceclass.resource.kubernetes.io/x",
        "accelerators.deviceClasses.gpu.example.com.allDevicesAtMost",
    ] {
        assert!(errors.contains(key), "{key}: {errors}");
    }
}
