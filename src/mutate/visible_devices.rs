//! No GPU by environment. The NVIDIA container toolkit gives a container the GPUs its
//! `NVIDIA_VISIBLE_DEVICES` names — `all` is every GPU of the node — and, where it accepts the
//! variable from unprivileged containers, it does so whatever the container asked the scheduler
//! for. NVIDIA's CUDA images set `NVIDIA_VISIBLE_DEVICES=all` themselves, so a container that
//! asks for no GPU would see every GPU of its node. Two halves:
//!
//! * the mutation: every container that asks for no GPU — as the GPU consumption model says
//!   ([`crate::workload::consumption::ContainerAsk::asks_no_gpu`]: no GPU by any resource name
//!   the accelerator map counts, no claim it uses whose devices count as GPUs, nothing it asks
//!   for that cannot be counted) and does not set the variable in `env` gets
//!   `NVIDIA_VISIBLE_DEVICES=void`, the toolkit's "no GPU". The pod's env overrides the image's,
//!   and an `env` entry overrides what `envFrom` (a ConfigMap or Secret key of that name) gives,
//!   so this hides both. It runs after every mutator that adds a container, on `containers` and
//!   `initContainers` of every pod spec, and on the ephemeral containers `kubectl debug` adds
//!   (which may ask for no resources at all). A TrainJob's own pod specs are its runtime's: its
//!   JobSet and pods get the variable where launchgate mutates them.
//! * the rule ([`violations`], `visibleDevices.tenantValue`, under the queue's
//!   `limits.enforcement`): a tenant's own value other than `void` — the last `env` entry of
//!   the name, a literal or a `valueFrom` launchgate cannot read — is a violation in every
//!   container. In one that asks for no GPU it is what the mutation would have hidden; in one
//!   that asks for GPUs the device plugin sets the variable to the GPUs it allocated, and the
//!   kubelet appends the pod's env after the device plugin's, so the pod's value replaces that
//!   list (`all`: every GPU of the node). `void` hides even a container's own GPUs, which
//!   widens nothing.
//!
//! What launchgate cannot see: a ConfigMap or Secret key named `NVIDIA_VISIBLE_DEVICES` given
//! by `envFrom` to a container that asks for GPUs (an `env` entry there would hide the device
//! plugin's list too). The node's toolkit setting
//! `accept-nvidia-visible-devices-envvar-when-unprivileged = false` closes that door.

use super::{Findings, MutationContext, Mutator};
use crate::json::Pointer as _;
use crate::patch::{MapNode, Node};
use crate::rules::{self, Violation};
use crate::workload::consumption::{Accounting, PodClaims};
use crate::workload::{self, WorkloadKind, edit, runtime};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The variable the NVIDIA container toolkit reads.
pub const VARIABLE: &str = "NVIDIA_VISIBLE_DEVICES";
/// Its value for "no GPU": the toolkit injects nothing.
pub const NO_GPU: &str = "void";

/// `queues.<name>.visibleDevices`: no GPU by environment.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct VisibleDevicesConfig {
    /// Write `NVIDIA_VISIBLE_DEVICES=void` into every container that asks for no GPU (by the
    /// accelerator map and its claims), and hold a tenant's own value of the variable to
    /// `void` in every container (rule `visibleDevices.tenantValue`, answered by
    /// `limits.enforcement`). false: leave the variable alone.
    pub enabled: bool,
}

impl Default for VisibleDevicesConfig {
    fn default() -> Self {
        VisibleDevicesConfig { enabled: true }
    }
}

/// The mutator.
pub const MUTATOR: Mutator = Mutator::new("visible-devices", mutate);

/// The container lists a tenant's value is judged in: the pod's containers, its init
/// containers, and the ephemeral containers `kubectl debug` adds.
const JUDGED_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

pub fn mutate(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    _findings: &mut Findings,
) -> bool {
    // A runtime-sized kind's pod specs are its runtime's.
    if !ctx.settings.visible_devices.enabled || ctx.kind.spec().runtime.is_some() {
        return false;
    }
    let namespace = ctx.namespace(object).to_string();
    let accounting = ctx.accounting(&namespace);
    ctx.for_each_pod_spec(object, |spec, _| {
        if workload::is_windows(spec) {
            return false;
        }
        let claims = accounting.claims(spec);
        let mut changed = false;
        workload::for_each_container_mut(spec, ctx.sidecars, |_, c| {
            changed |= hide(&accounting, &claims, c);
        });
        changed
    })
}

/// Writes `NVIDIA_VISIBLE_DEVICES=void` into `container` when it asks for no GPU and leaves the
/// variable unset in `env` (a value of its own is judged by the rule); true when it did.
fn hide(accounting: &Accounting<'_>, claims: &PodClaims, container: &mut MapNode<'_>) -> bool {
    if workload::effective_env(container, VARIABLE).is_some()
        || !accounting.container(container, claims).asks_no_gpu()
    {
        return false;
    }
    edit::upsert_env(container, VARIABLE, NO_GPU, false).changed()
}

/// `kubectl debug` adds an ephemeral container through `pods/ephemeralcontainers` (an UPDATE):
/// the new ones (names not in `old_object`) that ask for no GPU get the variable, as the pod's
/// containers do. Existing ephemeral containers cannot change.
pub fn mutate_ephemeral(
    ctx: &MutationContext<'_>,
    object: &mut Value,
    old_object: Option<&Value>,
) -> bool {
    if !ctx.settings.visible_devices.enabled {
        return false;
    }
    let existing: Vec<&str> = old_object
        .and_then(|o| o.at("/spec/ephemeralContainers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(workload::name_of)
        .collect();
    let namespace = ctx.namespace(object).to_string();
    let accounting = ctx.accounting(&namespace);
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return false;
    };
    if workload::is_windows(spec) {
        return false;
    }
    let claims = accounting.claims(spec);
    let mut changed = false;
    let items = spec
        .get_mut("ephemeralContainers")
        .and_then(Value::as_array_mut);
    for c in items.into_iter().flatten() {
        let Some(c) = c.as_object_mut() else { continue };
        if workload::name_in(c).is_some_and(|n| existing.contains(&n)) {
            continue;
        }
        changed |= hide(&accounting, &claims, &mut Node::scratch(c));
    }
    changed
}

/// What a container asks for, as the message says it.
enum Asks {
    None,
    /// GPUs, and how they are asked for.
    Gpus(String),
    /// Something that cannot be counted, which may be a GPU.
    Unknown,
}

/// What `container` asks for, read from the model.
fn asks(accounting: &Accounting<'_>, claims: &PodClaims, container: &Map<String, Value>) -> Asks {
    let ask = accounting.container(container, claims);
    if ask.asks_no_gpu() {
        Asks::None
    } else if ask.parts.is_empty() {
        Asks::Unknown
    } else {
        Asks::Gpus(ask.parts.join(" + "))
    }
}

/// The container's own `NVIDIA_VISIBLE_DEVICES` — its last `env` entry of the name
/// ([`workload::effective_env`]), with its index — when it is anything but the literal
/// `void`: how the value is shown.
fn tenant_value(container: &Map<String, Value>) -> Option<(usize, String)> {
    let entry = workload::effective_env(container, VARIABLE)?;
    let index = crate::json::member(container, "env")
        .and_then(Value::as_array)
        .and_then(|env| env.iter().rposition(|e| std::ptr::eq(e, entry)))
        .unwrap_or_default();
    if entry.get("valueFrom").is_some_and(|v| !v.is_null()) {
        return Some((index, "valueFrom".to_string()));
    }
    match entry
        .get("value")
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        NO_GPU => None,
        value => Some((index, format!("{value:?}"))),
    }
}

/// The violation of a tenant's value `shown` at `place` (an env entry) of the container
/// `where_`, which asks for `asks`.
fn violation(queue: &str, where_: &str, place: String, shown: String, asks: Asks) -> Violation {
    let set = if shown == "valueFrom" {
        format!("{VARIABLE} from valueFrom (launchgate cannot read it)")
    } else {
        format!("{VARIABLE}={shown}")
    };
    let message = match asks {
        Asks::None => format!(
            "{where_} asks for no GPU but sets {set}: the NVIDIA container toolkit would show it the GPUs the value names (\"all\": every GPU of its node); remove it (launchgate then writes {NO_GPU}) or set {NO_GPU} (visibleDevices: {NO_GPU})"
        ),
        Asks::Gpus(how) => format!(
            "{where_} sets {set}, which would replace the device plugin's list of the GPUs allocated to it ({how}) (\"all\": every GPU of its node); remove it (visibleDevices: {NO_GPU})"
        ),
        Asks::Unknown => format!(
            "{where_} sets {set}, which would replace the list of devices their driver allocated to it, which launchgate cannot count (\"all\": every GPU of its node); remove it (visibleDevices: {NO_GPU})"
        ),
    };
    Violation::new(
        rules::VISIBLE_DEVICES_TENANT_VALUE,
        format!("queue {queue:?}: {message}"),
    )
    .key(VARIABLE)
    .at(place)
    .value(shown)
    .limit(NO_GPU)
}

/// A tenant's own `NVIDIA_VISIBLE_DEVICES` other than `void`, in every container of the
/// workload's pod templates (init and ephemeral containers included) and of its patches to its
/// runtime, and in the settings of a runtime-sized kind's node container (a TrainJob's
/// `spec.trainer.env`). A Windows pod is left alone: the toolkit is Linux's.
pub fn violations(
    queue: &str,
    kind: WorkloadKind,
    object: &Value,
    accounting: &Accounting<'_>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    // Where a template is is written out only for a container that sets the variable.
    let templates = workload::template_ats(kind, object).into_iter().chain(
        runtime::patch_templates(kind, object)
            .into_iter()
            .map(|(info, template)| (info.at, template)),
    );
    for (at, template) in templates {
        let Some(spec) = workload::pod_spec(template) else {
            continue;
        };
        if workload::is_windows(spec) {
            continue;
        }
        // Claims are read only for a container that sets the variable.
        let mut claims: Option<PodClaims> = None;
        let spec_path = at.spec_path();
        for list in JUDGED_LISTS {
            let items = crate::json::member(spec, list).and_then(Value::as_array);
            for (i, c) in items.into_iter().flatten().enumerate() {
                let Some(c) = c.as_object() else { continue };
                let Some((index, shown)) = tenant_value(c) else {
                    continue;
                };
                let claims = claims.get_or_insert_with(|| accounting.claims(spec));
                let name = workload::name_in(c).unwrap_or_default();
                let where_ = format!("{spec_path}.{list}[{i}] ({name})");
                let place = format!("{spec_path}.{list}[{i}].env[{index}]");
                out.push(violation(
                    queue,
                    &where_,
                    place,
                    shown,
                    asks(accounting, claims, c),
                ));
            }
        }
    }
    // A runtime-sized kind's settings for its node container (a TrainJob's `spec.trainer`):
    // its GPUs are those settings' resources, else the runtime's.
    // Its settings' env is read as a container's.
    if let Some(rt) = kind.spec().runtime
        && let Some(settings) = runtime::settings(kind, object)
        && let Some(env) = settings.get(rt.env)
        && let Some((index, shown)) =
            tenant_value(&Map::from_iter([("env".to_string(), env.clone())]))
    {
        let at = rt.settings.join(".");
        let node = match settings.get(rt.resources) {
            Some(resources) => {
                let mut container = Map::new();
                container.insert("resources".into(), resources.clone());
                asks(accounting, &PodClaims::default(), &container)
            }
            None => Asks::Unknown,
        };
        out.push(violation(
            queue,
            &format!("{at} (the node container)"),
            format!("{at}.{}[{index}]", rt.env),
            shown,
            node,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::test_support::mutate_with;
    use crate::workload::consumption::offline;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "labels": {"wandb.ai/monitor": "true"}},
               "spec": spec})
    }

    fn gpus(name: &str, amount: Value) -> Value {
        json!({"limits": {name: amount, "cpu": "2"}})
    }

    /// The variable's effective value in the container at `list[i]` of a pod.
    fn seen(pod: &Value, list: &str, i: usize) -> Option<String> {
        workload::effective_env_value(pod["spec"][list][i].as_object().unwrap(), VARIABLE)
            .map(str::to_string)
    }

    #[test]
    fn every_container_that_asks_for_no_gpu_gets_void_and_a_second_pass_nothing() {
        let spec = json!({
        "initContainers": [{"name": "fetch"},
                           {"name": "log-shipper", "restartPolicy": "Always"}],
        "containers": [
            {"name": "cpu", "resources": {"limits": {"cpu": "4", "memory": "8Gi"}}},
            {"name": "train", "resources": gpus("nvidia.com/gpu", json!(1))},
            {"name": "amd", "resources": gpus("amd.com/gpu", json!("2"))},
            {"name": "slice", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}},
            {"name": "intel", "resources": gpus("gpu.intel.com/xe", json!(1))},
            {"name": "class", "resources": gpus("deviceclass.resource.kubernetes.io/gpu.nvidia.com", json!(1))},
            {"name": "zero", "resources": gpus("nvidia.com/gpu", json!("0"))},
            {"name": "istio-proxy"}
        ]});
        let (once, findings) = mutate_with(&MUTATOR, "{}", pod(spec));
        assert!(findings.warning_texts().is_empty());
        let void = Some(NO_GPU.to_string());
        for (list, i, expected) in [
            ("initContainers", 0, &void),
            ("initContainers", 1, &void),
            ("containers", 0, &void),
            ("containers", 1, &None),
            ("containers", 2, &None),
            ("containers", 3, &None),
            ("containers", 4, &None),
            ("containers", 5, &None),
            // Zero GPUs are no GPU; a configured sidecar asks for none either.
            ("containers", 6, &void),
            ("containers", 7, &void),
        ] {
            assert_eq!(&seen(&once, list, i), expected, "{list}[{i}]");
        }
        assert_eq!(
            once["spec"]["containers"][0]["env"],
            json!([{"name": VARIABLE, "value": NO_GPU}])
        );
        let (twice, _) = mutate_with(&MUTATOR, "{}", once.clone());
        assert_eq!(twice, once, "a second pass changes nothing");
    }

    #[test]
    fn a_value_of_the_tenants_is_left_for_the_rule_and_envfrom_is_overridden() {
        let spec = json!({"containers": [
            {"name": "a", "env": [{"name": VARIABLE, "value": "all"}]},
            // The kubelet uses the last entry: this one ends at void already.
            {"name": "b", "env": [{"name": VARIABLE, "value": "all"}, {"name": VARIABLE, "value": NO_GPU}]},
            {"name": "c", "env": [{"name": VARIABLE, "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}}]},
            // envFrom may carry the variable: an env entry wins over it.
            {"name": "d", "envFrom": [{"configMapRef": {"name": "gpu-settings"}}],
             "env": [{"name": "A", "value": "1"}]}
        ]});
        let (out, _) = mutate_with(&MUTATOR, "{}", pod(spec.clone()));
        for i in 0..3 {
            assert_eq!(out["spec"]["containers"][i], spec["containers"][i], "{i}");
        }
        assert_eq!(
            out["spec"]["containers"][3]["env"],
            json!([{"name": "A", "value": "1"}, {"name": VARIABLE, "value": NO_GPU}])
        );
    }

    #[test]
    fn nothing_when_turned_off_on_windows_or_for_claims_that_cannot_be_read() {
        let spec = json!({"containers": [{"name": "a"}]});
        let (out, _) = mutate_with(&MUTATOR, "visibleDevices: {enabled: false}", pod(spec));
        assert!(out["spec"]["containers"][0].get("env").is_none());
        let spec = json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]});
        let (out, _) = mutate_with(&MUTATOR, "{}", pod(spec));
        assert!(out["spec"]["containers"][0].get("env").is_none());
        // Offline, a claim cannot be read: whether it is a GPU is unknown, so it is left.
        let spec = json!({
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "t"}],
            "containers": [{"name": "a", "resources": {"claims": [{"name": "dev"}]}},
                           {"name": "b"}]});
        let (out, _) = mutate_with(&MUTATOR, "{}", pod(spec));
        assert!(out["spec"]["containers"][0].get("env").is_none());
        assert_eq!(seen(&out, "containers", 1).as_deref(), Some(NO_GPU));
    }

    #[test]
    fn every_pod_template_of_a_workload_is_walked() {
        let job = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "p", "labels": {"wandb.ai/monitor": "true"}},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "pytorch", "resources": gpus("nvidia.com/gpu", json!(8))}]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [
                    {"name": "pytorch"}]}}}}}});
        let (out, _) = mutate_with(&MUTATOR, "{}", job);
        let specs = &out["spec"]["pytorchReplicaSpecs"];
        assert!(
            specs["Master"]["template"]["spec"]["containers"][0]
                .get("env")
                .is_none()
        );
        assert_eq!(
            specs["Worker"]["template"]["spec"]["containers"][0]["env"],
            json!([{"name": VARIABLE, "value": NO_GPU}])
        );
    }

    fn judged(object: &Value) -> Vec<Violation> {
        violations(
            "q",
            WorkloadKind::of_object(object).unwrap(),
            object,
            &offline(),
        )
    }

    #[test]
    fn a_tenants_value_is_a_violation_in_every_container_that_says_why() {
        let spec = json!({
            "containers": [
                {"name": "cpu", "env": [{"name": VARIABLE, "value": "all"}]},
                {"name": "train", "resources": gpus("nvidia.com/gpu", json!(1)),
                 "env": [{"name": VARIABLE, "value": "all"}]},
                {"name": "quiet", "env": [{"name": VARIABLE, "value": "all"}, {"name": VARIABLE, "value": NO_GPU}]},
                {"name": "hidden", "resources": gpus("nvidia.com/gpu", json!(1)),
                 "env": [{"name": VARIABLE, "value": NO_GPU}]},
                {"name": "secret", "env": [{"name": "X", "value": "1"},
                    {"name": VARIABLE, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
                {"name": "empty", "env": [{"name": VARIABLE}]}
            ],
            "initContainers": [{"name": "i", "env": [{"name": VARIABLE, "value": "0,1"}]}],
            "ephemeralContainers": [{"name": "debugger", "env": [{"name": VARIABLE, "value": "all"}]}]
        });
        let found = judged(&pod(spec));
        let lines: Vec<(&str, &str)> = found
            .iter()
            .map(|v| (v.path.as_deref().unwrap(), v.value.as_deref().unwrap()))
            .collect();
        assert_eq!(
            lines,
            [
                ("spec.containers[0].env[0]", "\"all\""),
                ("spec.containers[1].env[0]", "\"all\""),
                ("spec.containers[4].env[1]", "valueFrom"),
                ("spec.containers[5].env[0]", "\"\""),
                ("spec.initContainers[0].env[0]", "\"0,1\""),
                ("spec.ephemeralContainers[0].env[0]", "\"all\""),
            ]
        );
        assert!(
            found
                .iter()
                .all(|v| v.rule == rules::VISIBLE_DEVICES_TENANT_VALUE)
        );
        assert_eq!(
            found[0].message,
            format!(
                "queue \"q\": spec.containers[0] (cpu) asks for no GPU but sets {VARIABLE}=\"all\": the NVIDIA container toolkit would show it the GPUs the value names (\"all\": every GPU of its node); remove it (launchgate then writes void) or set void (visibleDevices: void)"
            )
        );
        assert_eq!(
            found[1].message,
            format!(
                "queue \"q\": spec.containers[1] (train) sets {VARIABLE}=\"all\", which would replace the device plugin's list of the GPUs allocated to it (nvidia.com/gpu: 1) (\"all\": every GPU of its node); remove it (visibleDevices: void)"
            )
        );
        assert!(
            found[2]
                .message
                .contains("from valueFrom (launchgate cannot read it)")
        );
        // A Windows pod has no NVIDIA container toolkit.
        let windows = json!({"os": {"name": "windows"},
            "containers": [{"name": "a", "env": [{"name": VARIABLE, "value": "all"}]}]});
        assert!(judged(&pod(windows)).is_empty());
    }

    #[test]
    fn a_trainjobs_own_env_and_runtime_patches_are_judged() {
        let train = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "t"},
            "spec": {"runtimeRef": {"name": "torch"},
                "trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}},
                            "env": [{"name": VARIABLE, "value": "all"}]},
                "runtimePatches": [{"manager": "tenant", "trainingRuntimeSpec": {"template": {"spec": {
                    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                        "initContainers": [{"name": "warm", "env": [{"name": VARIABLE, "value": "all"}]}]}}}}}]}}}}]}});
        let found = judged(&train);
        let places: Vec<&str> = found.iter().map(|v| v.path.as_deref().unwrap()).collect();
        assert_eq!(
            places,
            [
                "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.initContainers[0].env[0]",
                "spec.trainer.env[0]",
            ]
        );
        assert!(
            found[1].message.contains("spec.trainer (the node container) sets NVIDIA_VISIBLE_DEVICES=\"all\", which would replace the device plugin's list of the GPUs allocated to it (nvidia.com/gpu: 2)"),
            "{}",
            found[1].message
        );
    }
}
