//! Launch guardrails ([`crate::topology::guardrails`]), the mutating half:
//!
//! * `gang` — a distributed Volcano Job or PyTorchJob whose `minAvailable` is below its
//!   rendezvous size gets it raised (`gang: raise`), so the gang scheduler starts it whole;
//! * `preemption` — a batch/v1 Job (and each Job of a JobSet whose pods say
//!   `restartPolicy: Never`) without a `podFailurePolicy` gets one that ignores pods failed by a
//!   disruption (`DisruptionTarget`: preemption, node drain, eviction) and the queue's retriable
//!   exit codes: with `backoffLimit: 0` such a pod would otherwise fail the run. Kubernetes allows
//!   a `podFailurePolicy` only with `restartPolicy: Never` and `podReplacementPolicy: Failed`
//!   (the API server defaults it to `TerminatingOrFailed` before admission: that default is
//!   replaced, a value the user wrote is kept and the policy left out);
//! * `success-policy` — a distributed Indexed Job (`endWithRankZero`) completes when index 0
//!   succeeds, as a PyTorchJob or Volcano Job ends with its master;
//! * `shared-memory` — every training container gets a memory-backed `emptyDir` at `/dev/shm`
//!   of the queue's size, unless it mounts something there or its memory limit is below it;
//! * `deadline` — a run without a run-level deadline gets the queue's default there (a pod
//!   template's own `activeDeadlineSeconds` bounds one pod, not the run): a Job's, TrainJob's
//!   or bare Pod's `spec.activeDeadlineSeconds`, a PyTorchJob's
//!   `spec.runPolicy.activeDeadlineSeconds`, each replicated Job's of a JobSet (and its pod
//!   templates'), each task's pod template of a Volcano Job (which has no other);
//! * a warning for a container that asks for several GPUs but starts no launcher.
//!
//! All write only what is absent, so a second pass changes nothing.

use super::{Findings, MutationContext, Mutator};
use crate::json::Pointer as _;
use crate::kinds::{Deadline, Holders, JobSpecs};
use crate::patch::{MapNode, Node};
use crate::pytorch::indexed_job::{self, launcher_of};
use crate::quantity::Quantity;
use crate::topology::guardrails::{GangAction, GuardrailsConfig, gang_shortfall};
use crate::workload::{self, ContainerRole, WorkloadKind, edit};
use serde_json::{Map, Value, json};

/// The volume launchgate mounts at `/dev/shm`.
pub const SHM_VOLUME: &str = "launchgate-shm";
const SHM_PATH: &str = "/dev/shm";

pub const GANG: Mutator = Mutator::new("gang", gang);
pub const PREEMPTION: Mutator = Mutator::new("preemption", preemption);
pub const SUCCESS_POLICY: Mutator = Mutator::new("success-policy", success_policy);
pub const SHARED_MEMORY: Mutator = Mutator::new("shared-memory", shared_memory);
pub const DEADLINE: Mutator = Mutator::new("deadline", deadline);
pub const MULTI_GPU: Mutator = Mutator::new("multi-gpu", multi_gpu);

fn cfg<'a>(ctx: &MutationContext<'a>) -> &'a GuardrailsConfig {
    ctx.settings.guardrails
}

fn gang(ctx: &MutationContext<'_>, object: &mut Node<'_, Value>, findings: &mut Findings) -> bool {
    if cfg(ctx).gang != GangAction::Raise || ctx.child {
        return false;
    }
    let Some(short) = gang_shortfall(ctx.kind, object) else {
        return false;
    };
    let Some(mut slot) = object.at_pointer(&short.pointer) else {
        return false;
    };
    *slot = json!(short.needed);
    findings.warn(
        crate::rules::GUARDRAILS_GANG_RAISED,
        format!(
            "launchgate: {}; raised to {} so it starts whole (guardrails.gang: raise)",
            short.explain(ctx.kind),
            short.needed
        ),
    );
    true
}

/// The `podFailurePolicy` launchgate writes.
fn pod_failure_policy(codes: &[i32]) -> Value {
    let mut rules = vec![json!({"action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})];
    if !codes.is_empty() {
        let mut values = codes.to_vec();
        values.sort_unstable();
        values.dedup();
        rules
            .push(json!({"action": "Ignore", "onExitCodes": {"operator": "In", "values": values}}));
    }
    json!({"rules": rules})
}

/// Adds the policy to one Job spec (`spec` of a Job, or of a JobSet's Job template).
/// `wrote_replacement`: the user wrote `podReplacementPolicy` (a batch/v1 Job's is defaulted
/// by the API server; a JobSet's Job template is not).
fn add_pod_failure_policy(
    job_spec: &mut MapNode<'_>,
    at: &str,
    codes: &[i32],
    wrote_replacement: bool,
    findings: &mut Findings,
) -> bool {
    if job_spec
        .get("podFailurePolicy")
        .is_some_and(|v| !v.is_null())
    {
        return false;
    }
    let replacement = job_spec
        .get("podReplacementPolicy")
        .and_then(Value::as_str)
        .map(str::to_string);
    if replacement.as_deref().is_some_and(|r| r != "Failed") && wrote_replacement {
        findings.warn(crate::rules::GUARDRAILS_PREEMPTION, format!(
            "launchgate: the Job of {at} sets podReplacementPolicy {}, so no podFailurePolicy can be added (Kubernetes allows one only with podReplacementPolicy: Failed): a preemption or node drain counts as a failure of this run",
            replacement.unwrap_or_default()
        ));
        return false;
    }
    let restart = job_spec
        .get("template")
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("restartPolicy"))
        .and_then(Value::as_str);
    if restart != Some("Never") {
        findings.warn(crate::rules::GUARDRAILS_PREEMPTION, format!(
            "launchgate: {at} has restartPolicy {}, so no podFailurePolicy can be added (Kubernetes allows one only with restartPolicy: Never): a preemption or node drain counts as a failure of this run",
            restart.unwrap_or("unset")
        ));
        return false;
    }
    job_spec.set("podFailurePolicy", pod_failure_policy(codes));
    if replacement.is_some() {
        job_spec.set("podReplacementPolicy", json!("Failed"));
    }
    true
}

fn preemption(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    findings: &mut Findings,
) -> bool {
    let cfg = &cfg(ctx).preemption;
    if !cfg.enabled || ctx.child {
        return false;
    }
    let codes = &cfg.retriable_exit_codes;
    match ctx.kind.spec().job_specs {
        JobSpecs::None => false,
        JobSpecs::Object => {
            let wrote = ctx.intent(object).wrote(&["spec", "podReplacementPolicy"]);
            object.object("spec").is_some_and(|mut spec| {
                add_pod_failure_policy(&mut spec, "spec.template.spec", codes, wrote, findings)
            })
        }
        JobSpecs::Templates => {
            let mut changed = false;
            for (pointer, at) in job_templates(ctx.kind, object) {
                let Some(mut spec) = object.at_pointer(&pointer) else {
                    continue;
                };
                let Some(mut spec) = spec.as_map_node() else {
                    continue;
                };
                // The kind's webhook defaults an unset restartPolicy (JobSet's to OnFailure),
                // before or after launchgate: only a Never written in the object takes a
                // policy.
                let never = spec
                    .get("template")
                    .and_then(|t| t.at("/spec/restartPolicy"))
                    .and_then(Value::as_str)
                    == Some("Never");
                if never {
                    changed |= add_pod_failure_policy(&mut spec, &at, codes, true, findings);
                }
            }
            changed
        }
    }
}

/// The Job templates of a kind whose pod templates sit in them ([`JobSpecs::Templates`]):
/// the JSON Pointer of each Job spec (the parent of its pod template) and the dotted path of
/// its pod spec.
fn job_templates(kind: WorkloadKind, object: &Value) -> Vec<(String, String)> {
    workload::templates(kind, object)
        .into_iter()
        .filter_map(|(info, _)| {
            let position = info.position;
            let (_, up) = position.template.split_last()?;
            let mut pointer: String = position
                .holders
                .path()
                .iter()
                .map(|k| format!("/{}", crate::json::escape(k)))
                .collect();
            match position.holders {
                Holders::Root | Holders::At(_) => {}
                Holders::Each(_) => pointer.push_str(&format!("/{}", info.index)),
                Holders::Keyed(_) => {
                    pointer.push_str(&format!("/{}", crate::json::escape(info.name.as_deref()?)))
                }
            }
            for k in up {
                pointer.push_str(&format!("/{}", crate::json::escape(k)));
            }
            Some((pointer, info.spec_path().to_string()))
        })
        .collect()
}

fn success_policy(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    _: &mut Findings,
) -> bool {
    if !cfg(ctx).end_with_rank_zero || ctx.child || ctx.kind.spec().job_specs != JobSpecs::Object {
        return false;
    }
    let indexed = object.at("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    let distributed = indexed_job::opt_in(ctx.settings.pytorch, object).is_some();
    let Some(mut spec) = object.object("spec") else {
        return false;
    };
    if !indexed || !distributed || spec.get("successPolicy").is_some_and(|v| !v.is_null()) {
        return false;
    }
    spec.set(
        "successPolicy",
        json!({"rules": [{"succeededIndexes": "0"}]}),
    );
    true
}

/// A container's memory limit, if it sets one.
fn memory_limit(c: &Map<String, Value>) -> Option<Quantity> {
    Quantity::from_json(c.get("resources")?.get("limits")?.get("memory")?)?.ok()
}

fn shared_memory(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    findings: &mut Findings,
) -> bool {
    let Some(size) = cfg(ctx).shm_size() else {
        return false;
    };
    let size_text = cfg(ctx)
        .shared_memory
        .as_ref()
        .map(|s| s.size_limit.clone())
        .unwrap_or_default();
    let sidecars = ctx.sidecars;
    ctx.for_each_pod_spec(object, |spec, spec_path| {
        if workload::is_windows(spec) {
            return false;
        }
        let ours = spec
            .get("volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|v| workload::name_of(v) == Some(SHM_VOLUME))
            .map(|v| v.get("emptyDir").is_some());
        if ours == Some(false) {
            findings.warn(crate::rules::GUARDRAILS_SHARED_MEMORY, format!(
                "launchgate: {spec_path}.volumes has a volume named {SHM_VOLUME} that is no emptyDir; /dev/shm was not added"
            ));
            return false;
        }
        let mut mounted = false;
        let mut changed = false;
        workload::for_each_container_mut(spec, sidecars, |slot, c| {
            if slot.role != ContainerRole::App {
                return;
            }
            if edit::mount_at(c, SHM_PATH).is_some() {
                mounted |= c
                    .get("volumeMounts")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|m| workload::name_of(m) == Some(SHM_VOLUME));
                return;
            }
            if memory_limit(c).is_some_and(|limit| limit < size) {
                findings.warn(crate::rules::GUARDRAILS_SHARED_MEMORY, format!(
                    "launchgate: {} has a memory limit below the queue's /dev/shm size {size_text} (guardrails.sharedMemory; it counts against that limit); /dev/shm was not added",
                    slot.path(spec_path)
                ));
                return;
            }
            let mount = json!({"name": SHM_VOLUME, "mountPath": SHM_PATH});
            changed |= edit::upsert_named(c, "volumeMounts", mount, false).changed();
            mounted = true;
        });
        if mounted && ours.is_none() {
            let volume = json!({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size_text}});
            changed |= edit::upsert_named(spec, "volumes", volume, false).changed();
        }
        changed
    })
}

/// Sets `key` in the object at `holder` (a JSON Pointer, created as needed) when absent.
fn set_absent(object: &mut Node<'_, Value>, holder: &str, key: &str, seconds: i64) -> bool {
    let Some(mut at) = object.as_map_node() else {
        return false;
    };
    for part in holder
        .trim_start_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
    {
        if at.get(part).is_some_and(|next| !next.is_object()) {
            return false;
        }
        at = at.into_object_or_new(part);
    }
    if at.get(key).is_some_and(|v| !v.is_null()) {
        return false;
    }
    at.set(key, json!(seconds));
    true
}

fn deadline(ctx: &MutationContext<'_>, object: &mut Node<'_, Value>, _: &mut Findings) -> bool {
    let Some(seconds) = cfg(ctx).cost_ceiling.default_deadline_seconds else {
        return false;
    };
    // A controller's pod carries its workload's deadline; a child workload, its root's.
    if ctx.child {
        return false;
    }
    match ctx.kind.spec().run.deadline {
        Deadline::Run(holder, key, _) => set_absent(object, holder, key, seconds),
        Deadline::EachJob => {
            let mut changed = false;
            for (pointer, _) in job_templates(ctx.kind, object) {
                if let Some(mut spec) = object.at_pointer(&pointer)
                    && spec.is_object()
                {
                    changed |= set_absent(&mut spec, "", "activeDeadlineSeconds", seconds);
                }
            }
            // Its pods get it too, as `limits.maxActiveDeadlineSeconds` reads them.
            changed | each_pod_template(ctx.kind, object, seconds)
        }
        Deadline::EachPod => each_pod_template(ctx.kind, object, seconds),
        Deadline::Never { .. } => false,
    }
}

/// Every pod template of the workload without `activeDeadlineSeconds` gets `seconds`.
fn each_pod_template(kind: WorkloadKind, object: &mut Node<'_, Value>, seconds: i64) -> bool {
    let mut changed = false;
    workload::for_each_template_mut(kind, object, |_, template| {
        if let Some(mut spec) = workload::pod_spec_mut(template)
            && spec.get("activeDeadlineSeconds").is_none_or(Value::is_null)
        {
            spec.set("activeDeadlineSeconds", json!(seconds));
            changed = true;
        }
    });
    changed
}

/// GPUs a container asks for (any `*/gpu` resource, limit else request).
pub fn container_gpus(c: &Map<String, Value>) -> i64 {
    let Some(resources) = c.get("resources") else {
        return 0;
    };
    ["limits", "requests"]
        .into_iter()
        .find_map(|kind| {
            let map = resources.get(kind)?.as_object()?;
            let gpus: i64 = map
                .iter()
                .filter(|(k, _)| k.ends_with("/gpu"))
                .filter_map(|(_, v)| Quantity::from_json(v)?.ok())
                .map(|q| q.to_f64().ceil() as i64)
                .sum();
            (gpus > 0).then_some(gpus)
        })
        .unwrap_or(0)
}

fn multi_gpu(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    findings: &mut Findings,
) -> bool {
    if !cfg(ctx).multi_gpu_warning || ctx.child {
        return false;
    }
    // A queue or job that sets processes per node has said how the GPUs are used.
    let nproc =
        ctx.settings.pytorch.nproc_per_node.is_some() || object.at("/spec/nprocPerNode").is_some();
    if nproc {
        return false;
    }
    for (info, template) in workload::templates(ctx.kind, object) {
        let Some(spec) = workload::pod_spec(template) else {
            continue;
        };
        for (slot, c) in workload::containers(spec, ctx.sidecars) {
            let gpus = container_gpus(c);
            let sets_nproc = workload::effective_env(c, "PET_NPROC_PER_NODE").is_some();
            if slot.role == ContainerRole::App
                && gpus > 1
                && launcher_of(c).is_none()
                && !sets_nproc
            {
                findings.warn(crate::rules::GUARDRAILS_MULTI_GPU, format!(
                    "launchgate: {} asks for {gpus} GPUs but starts no multi-process launcher (torchrun, python -m torch.distributed.run, accelerate launch, deepspeed) and sets no processes per node: a plain `python train.py` uses one GPU and leaves the others idle",
                    slot.path(&info.spec_path())
                ));
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::test_support::mutate_with;

    fn job(spec: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ddp"}, "spec": spec})
    }

    fn container(gpus: i64, command: Value) -> Value {
        json!({"name": "t", "command": command, "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "16Gi"}}})
    }

    #[test]
    fn a_job_ignores_disruptions_and_retriable_exit_codes() {
        let j = job(
            json!({"template": {"spec": {"restartPolicy": "Never", "containers": [container(1, json!(["python"]))]}}}),
        );
        let q = "guardrails: {preemption: {enabled: true, retriableExitCodes: [137, 42, 137]}}";
        let (out, f) = mutate_with(&PREEMPTION, q, j.clone());
        assert!(f.warning_texts().is_empty());
        assert_eq!(
            out["spec"]["podFailurePolicy"],
            json!({"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42, 137]}}]})
        );
        let (again, _) = mutate_with(&PREEMPTION, q, out.clone());
        assert_eq!(again, out);
        let mut on_failure = j.clone();
        on_failure["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
        let (out, f) = mutate_with(&PREEMPTION, q, on_failure.clone());
        assert_eq!(out, on_failure);
        assert!(f.warning_texts()[0].contains("allows one only with restartPolicy: Never"));
        let mut own = j.clone();
        own["spec"]["podFailurePolicy"] = json!({"rules": []});
        assert_eq!(mutate_with(&PREEMPTION, q, own.clone()).0, own);
        // The API server's default podReplacementPolicy becomes the one a policy needs; one
        // the user wrote (server-side apply owns it) is kept, and no policy added.
        let mut defaulted = j.clone();
        defaulted["spec"]["podReplacementPolicy"] = json!("TerminatingOrFailed");
        let (out, _) = mutate_with(&PREEMPTION, q, defaulted.clone());
        assert_eq!(out["spec"]["podReplacementPolicy"], "Failed");
        let mut written = defaulted.clone();
        written["metadata"]["managedFields"] = json!([{"operation": "Apply", "manager": "kubectl",
            "fieldsV1": {"f:spec": {"f:podReplacementPolicy": {}}}}]);
        let (out, f) = mutate_with(&PREEMPTION, q, written.clone());
        assert_eq!(out, written);
        assert!(
            f.warning_texts()[0].contains("podReplacementPolicy TerminatingOrFailed"),
            "{:?}",
            f.warning_texts()
        );
    }

    #[test]
    fn a_distributed_indexed_job_ends_with_index_zero() {
        let j = job(
            json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2,
            "template": {"spec": {"subdomain": "ddp", "containers": [container(1, json!(["torchrun", "t.py"]))]}}}),
        );
        let q = "{guardrails: {endWithRankZero: true}, pytorch: {indexedJobs: auto}}";
        let (out, _) = mutate_with(&SUCCESS_POLICY, q, j.clone());
        assert_eq!(
            out["spec"]["successPolicy"],
            json!({"rules": [{"succeededIndexes": "0"}]})
        );
        // A sharded (not distributed) Indexed Job keeps running to its last index.
        let mut sharded = j.clone();
        sharded["spec"]["template"]["spec"]["containers"][0]["command"] =
            json!(["python", "eval.py"]);
        assert_eq!(mutate_with(&SUCCESS_POLICY, q, sharded.clone()).0, sharded);
    }

    #[test]
    fn shared_memory_fits_the_memory_limit_or_is_left_out() {
        let q = "guardrails: {sharedMemory: {sizeLimit: 8Gi}}";
        let j =
            job(json!({"template": {"spec": {"containers": [container(1, json!(["python"]))]}}}));
        let (out, f) = mutate_with(&SHARED_MEMORY, q, j);
        assert!(f.warning_texts().is_empty());
        let spec = &out["spec"]["template"]["spec"];
        assert_eq!(
            spec["volumes"][0],
            json!({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}})
        );
        assert_eq!(
            spec["containers"][0]["volumeMounts"][0],
            json!({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
        );
        let (again, _) = mutate_with(&SHARED_MEMORY, q, out.clone());
        assert_eq!(again, out);
        let mut small = container(1, json!(["python"]));
        small["resources"]["limits"]["memory"] = json!("4Gi");
        let j = job(json!({"template": {"spec": {"containers": [small]}}}));
        let (out, f) = mutate_with(&SHARED_MEMORY, q, j.clone());
        assert_eq!(out, j);
        assert!(f.warning_texts()[0].contains("memory limit below the queue's /dev/shm size 8Gi"));
        let mut own = container(1, json!(["python"]));
        own["volumeMounts"] = json!([{"name": "dshm", "mountPath": "/dev/shm/"}]);
        let j = job(
            json!({"template": {"spec": {"volumes": [{"name": "dshm", "emptyDir": {}}], "containers": [own]}}}),
        );
        assert_eq!(mutate_with(&SHARED_MEMORY, q, j.clone()).0, j);
    }

    #[test]
    fn a_run_without_a_deadline_gets_the_queues() {
        let q = "guardrails: {costCeiling: {defaultDeadlineSeconds: 86400}}";
        let j = job(json!({"template": {"spec": {"containers": []}}}));
        let (out, _) = mutate_with(&DEADLINE, q, j);
        assert_eq!(out["spec"]["activeDeadlineSeconds"], 86400);
        let pt = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {}, "spec": {"pytorchReplicaSpecs": {}}});
        let (out, _) = mutate_with(&DEADLINE, q, pt);
        assert_eq!(out["spec"]["runPolicy"]["activeDeadlineSeconds"], 86400);
        let vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {},
            "spec": {"tasks": [{"name": "a", "template": {"spec": {"activeDeadlineSeconds": 5}}},
                               {"name": "b", "template": {"spec": {}}}]}});
        let (out, _) = mutate_with(&DEADLINE, q, vc);
        assert_eq!(
            out["spec"]["tasks"][0]["template"]["spec"]["activeDeadlineSeconds"],
            5
        );
        assert_eq!(
            out["spec"]["tasks"][1]["template"]["spec"]["activeDeadlineSeconds"],
            86400
        );
        let mut own = job(json!({"activeDeadlineSeconds": 60, "template": {"spec": {}}}));
        own["metadata"]["name"] = json!("x");
        assert_eq!(mutate_with(&DEADLINE, q, own.clone()).0, own);
    }

    #[test]
    fn a_pod_deadline_does_not_stand_for_the_runs() {
        let q = "guardrails: {costCeiling: {defaultDeadlineSeconds: 86400}}";
        // Each pod may run 1 h; the Job, 100 of them two at a time: it gets the run-level one.
        let j = job(json!({"completions": 100, "parallelism": 2,
            "template": {"spec": {"activeDeadlineSeconds": 3600, "containers": []}}}));
        let (out, _) = mutate_with(&DEADLINE, q, j);
        assert_eq!(out["spec"]["activeDeadlineSeconds"], 86400);
        assert_eq!(
            out["spec"]["template"]["spec"]["activeDeadlineSeconds"],
            3600
        );
        let (again, _) = mutate_with(&DEADLINE, q, out.clone());
        assert_eq!(again, out);
        let pt = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {},
            "spec": {"runPolicy": {"backoffLimit": 3}, "pytorchReplicaSpecs": {"Master": {"replicas": 1,
                "template": {"spec": {"activeDeadlineSeconds": 60, "containers": []}}}}}});
        let (out, _) = mutate_with(&DEADLINE, q, pt);
        assert_eq!(out["spec"]["runPolicy"]["activeDeadlineSeconds"], 86400);
        assert_eq!(out["spec"]["runPolicy"]["backoffLimit"], 3);
        // A JobSet has no deadline of its own: each replicated Job gets one, its pods keep theirs.
        let js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {},
            "spec": {"replicatedJobs": [
                {"name": "a", "template": {"spec": {"template": {"spec": {"activeDeadlineSeconds": 5}}}}},
                {"name": "b", "template": {"spec": {"activeDeadlineSeconds": 60, "template": {"spec": {}}}}}]}});
        let (out, _) = mutate_with(&DEADLINE, q, js);
        let jobs = &out["spec"]["replicatedJobs"];
        assert_eq!(jobs[0]["template"]["spec"]["activeDeadlineSeconds"], 86400);
        assert_eq!(
            jobs[0]["template"]["spec"]["template"]["spec"]["activeDeadlineSeconds"],
            5
        );
        assert_eq!(jobs[1]["template"]["spec"]["activeDeadlineSeconds"], 60);
        // Its pods get the queue's too, where they set none (`maxActiveDeadlineSeconds` reads them).
        assert_eq!(
            jobs[1]["template"]["spec"]["template"]["spec"]["activeDeadlineSeconds"],
            86400
        );
        let (again, _) = mutate_with(&DEADLINE, q, out.clone());
        assert_eq!(again, out);
    }

    #[test]
    fn a_volcano_gang_is_raised_to_its_rendezvous_size() {
        let vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"minAvailable": 1, "plugins": {"pytorch": []}, "tasks": [
                {"name": "master", "replicas": 1, "template": {}}, {"name": "worker", "replicas": 2, "template": {}}]}});
        let (out, f) = mutate_with(&GANG, "guardrails: {gang: raise}", vc.clone());
        assert_eq!(out["spec"]["minAvailable"], 3);
        assert!(
            f.warning_texts()[0].contains("raised to 3"),
            "{:?}",
            f.warning_texts()
        );
        assert_eq!(
            mutate_with(&GANG, "guardrails: {gang: deny}", vc.clone()).0,
            vc
        );
    }

    #[test]
    fn several_gpus_without_a_launcher_are_warned_about() {
        let q = "guardrails: {multiGpuWarning: true}";
        let j = job(
            json!({"template": {"spec": {"containers": [container(4, json!(["python", "train.py"]))]}}}),
        );
        let (out, f) = mutate_with(&MULTI_GPU, q, j.clone());
        assert_eq!(out, j);
        assert!(
            f.warning_texts()[0].contains("asks for 4 GPUs but starts no multi-process launcher"),
            "{:?}",
            f.warning_texts()
        );
        for quiet in [
            job(
                json!({"template": {"spec": {"containers": [container(4, json!(["torchrun", "--nproc-per-node=4", "train.py"]))]}}}),
            ),
            job(
                json!({"template": {"spec": {"containers": [container(1, json!(["python", "train.py"]))]}}}),
            ),
        ] {
            assert!(
                mutate_with(&MULTI_GPU, q, quiet)
                    .1
                    .warning_texts()
                    .is_empty()
            );
        }
    }
}
