//! The policy compiled to Kubernetes' native admission policies: per queue, a
//! `ValidatingAdmissionPolicy` (its limits) and a `MutatingAdmissionPolicy` (the static
//! mutations), each with its binding, matching exactly the requests the webhook acts on.
//!
//! They run inside the API server: no network hop, no certificates, no outage when a webhook
//! pod is down. What CEL cannot decide the way the webhook does stays in the webhook, and the
//! [`Report`] says what, per queue, and why — so an operator knows what a webhook outage
//! would cost. [`native_subset`] is the policy the webhook would run if it did only what the
//! native policies do: the two decide alike on every request (the differential suite on a real
//! API server compares them).

#[cfg(test)]
pub(crate) mod eval;
mod kueue;
mod mutations;
mod select;
mod slots;
#[cfg(test)]
mod update_tests;
pub mod webhooks;

pub use slots::{
    DEFAULT_POLICY_SLOTS, MANAGED_BY, MAX_POLICY_SLOTS, POLICY_SET_LABEL, POLICY_SLOT_LABEL,
    QUEUE_KEY_ANNOTATION, SLOT_KINDS, SlotKind, assign_slots, chart_slot_file, check_capacity,
    dormant, dormant_set, dormant_spec, existing_slots, is_dormant, key_of, owner, replacement,
    slot_base, slot_names, slot_objects, slot_of, write_order,
};

use crate::cel::{Identifier, ident};
use crate::mutate::labels::queue_label_value;
use crate::policy::{Config, Policy, Queue};
use crate::rules::{self, Rule};
use crate::topology::guardrails::GangAction;
use crate::validate::Enforcement;
use crate::workload::WorkloadKind;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Something the webhook does that the native policies do not.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Gap {
    /// What it is: a config key (`queues.gpu-queue.pytorch`) or a behaviour.
    pub what: String,
    /// Why CEL does not do it here.
    pub why: String,
}

/// What one queue's native policies do, and what stays in the webhook.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QueueReport {
    /// The queue's config key.
    pub queue: String,
    /// The native objects' names.
    pub objects: Vec<String>,
    /// What runs natively, in words.
    pub native: Vec<String>,
    /// What stays in the webhook for this queue.
    #[serde(rename = "webhookOnly")]
    pub webhook_only: Vec<Gap>,
}

/// The compiler's report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The kinds the native policies cover.
    pub kinds: Vec<&'static str>,
    /// What stays in the webhook for every queue.
    #[serde(rename = "webhookOnly")]
    pub webhook_only: Vec<Gap>,
    /// Per queue.
    pub queues: Vec<QueueReport>,
}

/// The compiled policies.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The objects, in the order to apply them (each policy before its binding).
    pub objects: Vec<Value>,
    /// What they do, and what stays in the webhook.
    pub report: Report,
}

/// A DNS-subdomain name part for a queue key: the key itself when it is one, else its valid
/// characters lowercased and a hash of the key (as for the queue label).
fn slug(key: &str) -> String {
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if !key.is_empty()
        && key.len() <= 40
        && key.chars().all(valid)
        && !key.starts_with('-')
        && !key.ends_with('-')
    {
        return key.to_string();
    }
    let hash = key.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let mapped: String = key
        .to_ascii_lowercase()
        .chars()
        .map(|c| if valid(c) { c } else { '-' })
        .collect();
    let mut prefix = mapped.trim_matches('-').to_string();
    prefix.truncate(30);
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("q-{hash:08x}")
    } else {
        format!("{prefix}-{hash:08x}")
    }
}

/// Compile options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The hash of the config file compiled (an annotation on every object), if known.
    pub config_hash: Option<String>,
    /// The set the objects belong to: their name prefix and [`POLICY_SET_LABEL`] (default:
    /// `launchgate`, unlabelled).
    pub policy_set: Option<String>,
    /// A namespaceSelector for every binding (the webhooks' namespace exclusions).
    pub namespace_selector: Option<Value>,
    /// Name the objects by slot instead of by queue key: the queue with slot `n` in this map
    /// gets `<set>-q<n>-mutate` and `<set>-q<n>-limits` ([`slot_base`]), so every name a set
    /// can use is known in advance ([`slot_names`]: what a ClusterRole's `resourceNames` can
    /// list). A queue missing from the map keeps its key-derived name.
    pub slots: Option<BTreeMap<String, usize>>,
}

fn metadata(name: &str, queue: &Queue, options: &Options) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert(MANAGED_BY.0.into(), json!(MANAGED_BY.1));
    labels.insert(
        crate::mutate::labels::QUEUE_LABEL.into(),
        json!(queue_label_value(&queue.name)),
    );
    if let Some(set) = &options.policy_set {
        labels.insert(POLICY_SET_LABEL.into(), json!(set));
    }
    if let Some(slot) = options.slots.as_ref().and_then(|s| s.get(&queue.key)) {
        labels.insert(POLICY_SLOT_LABEL.into(), json!(format!("q{slot}")));
    }
    let mut annotations = serde_json::Map::new();
    annotations.insert(QUEUE_KEY_ANNOTATION.into(), json!(queue.key));
    if let Some(hash) = &options.config_hash {
        annotations.insert("launchgate.io/config-hash".into(), json!(hash));
    }
    json!({"name": name, "labels": labels, "annotations": annotations})
}

/// A binding's spec: its policy, the namespaces it covers, and (validating) its actions.
fn binding_spec(policy: &str, options: &Options, actions: Option<&str>) -> Value {
    let mut spec = json!({"policyName": policy});
    if let Some(selector) = &options.namespace_selector {
        spec["matchResources"] = json!({"namespaceSelector": selector});
    }
    if let Some(action) = actions {
        spec["validationActions"] = json!([action]);
    }
    spec
}

fn resource_rules(operations: &[&str]) -> Value {
    Value::Array(
        select::kinds()
            .map(|k| {
                let (group, version, resource) = k.api_resource();
                json!({
                    "apiGroups": [group],
                    "apiVersions": [version],
                    "operations": operations,
                    "resources": [resource],
                })
            })
            .collect(),
    )
}

fn match_conditions(policy: &Policy, queue: &Queue) -> Value {
    Value::Array(
        select::match_conditions(policy, queue)
            .into_iter()
            .map(|(name, expression)| json!({"name": name, "expression": expression}))
            .collect(),
    )
}

/// A policy's `variables`: the only way the compiler writes them, so every name is an
/// [`Identifier`] (never a CEL reserved word, which the API server refuses).
fn policy_variables(named: &[(Identifier, String)]) -> Value {
    Value::Array(
        named
            .iter()
            .map(|(name, expression)| json!({"name": name.as_str(), "expression": expression}))
            .collect(),
    )
}

/// What the webhook does for every queue that the native policies do not.
fn everywhere() -> Vec<Gap> {
    let gap = |what: &str, why: &str| Gap {
        what: what.into(),
        why: why.into(),
    };
    // The kinds the native policies do not cover, each with its descriptor's reason.
    let mut out: Vec<Gap> = crate::workload::WorkloadKind::all()
        .filter_map(|k| k.spec().native.err().map(|why| gap(k.as_str(), why)))
        .collect();
    out.extend([
        gap(
            "UPDATE",
            "an UPDATE of a workload already in its queue (Kueue's admission, a resize) is re-validated by the webhook only: it reports only what the update made worse, which needs the old object's violations. The native policies judge such an UPDATE only for an exemption mark they cannot prove, and as a CREATE when it comes from a requester no exemption covers on a workload launchgate marked exempt (in `policyMode: native` nothing writes the mark, so a tenant's UPDATE of an exempt workload there is not told apart). An UPDATE that brings a workload into a queue (it was no launch workload, or another queue's) they judge as a CREATE, as the webhook does",
        ),
        gap(
            "launchgate.io/mutations annotation",
            "the decision trail lists the mutations that changed something; native mutations write the queue label only",
        ),
        gap(
            "warnings, metrics, events and the decision log",
            "a native mutation cannot warn (an unconfigured queue, a privileged container left as is); the API server's own apiserver_admission_* metrics count native policies",
        ),
        gap(
            "backoffLimit intent from kubectl's last-applied-configuration",
            "CEL cannot parse the annotation's JSON: the native policy reads the text `\"backoffLimit\":` in it, so a label or annotation key named backoffLimit there also counts as written",
        ),
    ]);
    // launchgate's own denials that no queue setting turns on: each says in its table entry
    // why it has no CEL form.
    out.extend(rules::RULES.iter().filter_map(|rule| {
        let why = rule.native.reason()?;
        (!rule.config_key.starts_with("queues.")).then(|| Gap {
            what: format!("rule {}", rule.id),
            why: why.into(),
        })
    }));
    out
}

/// What stays in the webhook for `queue` (its mutations; its limits add their own).
fn queue_gaps(policy: &Policy, queue: &Queue) -> Vec<Gap> {
    let at = format!("queues.{}", queue.key);
    let c = &queue.config;
    let mut out = Vec::new();
    let mut gap = |key: &str, why: &str| {
        out.push(Gap {
            what: format!("{at}.{key}"),
            why: why.into(),
        })
    };
    if c.cache.as_ref().is_some_and(|cache| cache.enabled) {
        gap(
            "cache",
            "reusing a volume of the same claim or NFS export (paths compared normalised), leaving a mount point or an env var from envFrom alone, and the non-root mount path are not compiled",
        );
    }
    // A rule that is not compiled says why in its table entry.
    let webhook_only = |rule: &Rule| rule.native.reason().unwrap_or_default();
    if c.pytorch.enabled {
        gap("pytorch", webhook_only(rules::PYTORCH_ON_UNWIRABLE));
    }
    let g = &c.guardrails;
    if g.gang != GangAction::Off {
        gap("guardrails.gang", webhook_only(rules::GUARDRAILS_GANG));
    }
    if g.preemption.enabled {
        gap(
            "guardrails.preemption",
            "the podFailurePolicy also replaces the API's podReplacementPolicy default and depends on the restartPolicy of each replicated job",
        );
    }
    if g.end_with_rank_zero {
        gap(
            "guardrails.endWithRankZero",
            "only distributed Indexed Jobs, as the wiring recognises them",
        );
    }
    if g.multi_gpu_warning {
        gap(
            "guardrails.multiGpuWarning",
            "a warning: native mutations cannot warn",
        );
    }
    if g.shared_memory.is_some() {
        gap(
            "guardrails.sharedMemory",
            "the /dev/shm volume is skipped for containers whose memory limit is below it, with a warning",
        );
    }
    if g.cost_ceiling.default_deadline_seconds.is_some() || g.cost_ceiling.max_gpu_hours.is_some() {
        gap(
            "guardrails.costCeiling",
            webhook_only(rules::GUARDRAILS_COST_CEILING),
        );
    }
    if g.rendezvous_preflight {
        gap(
            "guardrails.rendezvousPreflight",
            "reads Services from the cluster",
        );
    }
    if c.visible_devices.enabled {
        // Where a kind run from a runtime takes a tenant's env (a TrainJob's `spec.trainer.env`).
        let runtime_env: Vec<String> = WorkloadKind::all()
            .filter_map(|k| k.spec().runtime.map(|rt| (k, rt)))
            .map(|(k, rt)| format!("a {}'s {}.{}", k.as_str(), rt.settings.join("."), rt.env))
            .collect();
        gap(
            "visibleDevices",
            &format!(
                "NVIDIA_VISIBLE_DEVICES=void in a container that uses a DRA claim whose devices count as no GPU (claims are read from the cluster) and in the ephemeral containers kubectl debug adds (an UPDATE); a tenant's value in {} or runtime patches, and on an UPDATE",
                runtime_env.join(", ")
            ),
        );
    }
    // A TrainJob's size is its runtime's: where something bounds a run's size, its rules deny
    // in the webhook only (the native policies judge no TrainJob).
    let denies = policy.deny_rules(queue);
    for rule in [
        rules::LIMITS_TRAINING_RUNTIMES,
        rules::LIMITS_UNVERIFIABLE_RUNTIME,
    ] {
        if denies.contains(&rule) {
            let key = rule.config_key.replace("queues.<queue>.", "");
            gap(&key, webhook_only(rule));
        }
    }
    if queue.limits.limits_gpus() {
        gap(
            "limits (GPUs through DRA claims)",
            webhook_only(rules::ACCELERATORS_UNCOUNTED),
        );
        gap(
            "limits (GPUs by the accelerator map)",
            "the compiled limits read each resource by its own name: MIG slices, other vendors' names and a DeviceClass's extended name are counted as GPUs, and pod-level resources (spec.resources) held to the most per container, by the webhook only",
        );
    }
    out
}

/// `config` restricted to what the native policies do: the policy the webhook would run if
/// it did only that. (A queue's limits keep everything CEL checks; see `LimitsCel::subset`.)
pub fn native_subset(policy: &Policy) -> Config {
    let mut config = policy.config.clone();
    for (key, qc) in config.queues.iter_mut() {
        if let Some(cache) = qc.cache.as_mut() {
            cache.enabled = false;
        }
        qc.pytorch.enabled = false;
        let g = &mut qc.guardrails;
        g.gang = GangAction::Off;
        g.preemption.enabled = false;
        g.end_with_rank_zero = false;
        g.multi_gpu_warning = false;
        g.shared_memory = None;
        g.cost_ceiling.default_deadline_seconds = None;
        g.cost_ceiling.max_gpu_hours = None;
        g.rendezvous_preflight = false;
        if let Some(queue) = policy.queue(key) {
            let cel = queue.limits.to_cel(&queue.name, key, &[], "false");
            qc.limits = cel.subset(&qc.limits);
        }
    }
    config
}

/// What the compiled run-level defaults cover, for the report: each kind with defaults in its
/// descriptor, and the fields they write.
fn run_defaults_covered() -> String {
    let with_defaults: Vec<WorkloadKind> = select::kinds()
        .filter(|k| !k.spec().run.defaults.is_empty())
        .collect();
    let mut fields: Vec<String> = with_defaults
        .iter()
        .flat_map(|k| k.spec().run.defaults.iter())
        .map(|d| d.at[1..].join("."))
        .collect();
    fields.sort();
    fields.dedup();
    format!(
        "run-level defaults of {} ({})",
        with_defaults
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        fields.join(", ")
    )
}

/// The policy that decides exactly as `policy`'s native admission policies do: what `audit
/// --native` and `test --native` judge with. (The differential suite on a real API server
/// holds the two equal; the [`Report`] lists what it leaves out.)
pub fn as_native(policy: &Policy) -> Result<Policy, crate::policy::ConfigErrors> {
    Policy::from_config(native_subset(policy))
}

/// Compiles `policy` to native admission policies.
pub fn compile(policy: &Policy, options: &Options) -> Compiled {
    let sidecars = &policy.config.match_rules.sidecar_containers;
    let child = select::is_verified_child(policy);
    let specs = select::specs(select::Root::Object);
    // Judged as a CREATE: a CREATE, or an UPDATE that brings the workload into the queue (or
    // one outside the exemption that admitted it).
    let as_create = select::judged_as_create(policy);
    let mut objects = Vec::new();
    let mut queues = Vec::new();
    for queue in policy.queues.values() {
        let set = options.policy_set.as_deref().unwrap_or("launchgate");
        let base = match options.slots.as_ref().and_then(|s| s.get(&queue.key)) {
            Some(&slot) => slot_base(set, slot),
            None => format!("{set}-{}", slug(&queue.key)),
        };
        let mut report = QueueReport {
            queue: queue.key.clone(),
            objects: Vec::new(),
            native: Vec::new(),
            webhook_only: queue_gaps(policy, queue),
        };
        // An UPDATE that brings the workload into this queue: judged as a CREATE.
        let enters = (select::ENTERS_QUEUE, select::enters_queue(policy, queue));

        // Mutations.
        let mut mutations = Vec::new();
        if let Some(expr) = mutations::security_context(queue) {
            mutations.push(expr);
            report
                .native
                .push("container and pod securityContext defaults".into());
        }
        if let Some(expr) = mutations::visible_devices(queue, "variables.specs") {
            mutations.push(expr);
            report.native.push(
                "NVIDIA_VISIBLE_DEVICES=void in every container that asks for no GPU by the accelerator map's resource names and uses no DRA claim".into(),
            );
        }
        if let Some(expr) = mutations::job_defaults(queue, "variables.child") {
            mutations.push(expr);
            report.native.push(run_defaults_covered());
        }
        mutations.push(mutations::labels(queue, "variables.child"));
        report.native.push(if queue.config.kueue.is_some() {
            "the launchgate.io/queue label and the Kueue labels".to_string()
        } else {
            "the launchgate.io/queue label".to_string()
        });
        let mut named = vec![
            (ident!("specs"), specs.clone()),
            (ident!("child"), child.clone()),
        ];
        let created = mutations
            .iter()
            .map(|m| format!("({m})"))
            .collect::<Vec<_>>()
            .join(" + ");
        // An UPDATE judged as a CREATE gets what an UPDATE may change of what a CREATE writes:
        // the queue's Kueue labels (pod templates are not rewritten, as by the webhook).
        let (operations, expression): (&[&str], String) = match mutations::kueue_labels(
            queue,
            "variables.child",
        ) {
            Some(kueue) => {
                named.push(enters.clone());
                report.native.push(
                    "the Kueue labels on an UPDATE that brings a workload into the queue".into(),
                );
                (
                    &["CREATE", "UPDATE"],
                    format!(
                        "request.operation == 'CREATE' ? ({created}) : {as_create} ? ({kueue}) : []"
                    ),
                )
            }
            None => (&["CREATE"], created),
        };
        let variables = policy_variables(&named);
        let name = format!("{base}-mutate");
        objects.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": metadata(&name, queue, options),
            "spec": {
                // A mutation that cannot be evaluated leaves the object as it is, as the
                // webhook's mutations never deny.
                "failurePolicy": "Ignore",
                "reinvocationPolicy": "IfNeeded",
                "matchConstraints": {"resourceRules": resource_rules(operations)},
                "matchConditions": match_conditions(policy, queue),
                "variables": variables,
                // One expression: the API server times and applies each mutation of a
                // policy on its own (and again when it reinvokes the policy), so three
                // independent patch lists cost more as three mutations than as one list.
                "mutations": [{
                    "patchType": "JSONPatch",
                    "jsonPatch": {"expression": expression},
                }],
            },
        }));
        objects.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": metadata(&name, queue, options),
            "spec": binding_spec(&name, options, None),
        }));
        report.objects.push(name);

        // Limits.
        let at = format!("queues.{}.limits", queue.key);
        let cel = queue
            .limits
            .to_cel(&queue.name, &at, sidecars, "variables.child");
        report
            .webhook_only
            .extend(cel.gaps.iter().map(|(what, why)| Gap {
                what: what.clone(),
                why: why.clone(),
            }));
        let kueue = queue
            .config
            .kueue
            .as_ref()
            .and_then(|cfg| kueue::violations(cfg, &queue.name, "variables.child"));
        if let Some(cfg) = queue.config.kueue.as_ref().filter(|_| kueue.is_some()) {
            let labels: Vec<&str> = cfg.settings().iter().map(|s| s.label).collect();
            let managed = |how: fn(crate::kinds::Kueue) -> bool| {
                let names: Vec<&str> = select::kinds()
                    .filter(|k| how(k.spec().kueue))
                    .map(|k| k.as_str())
                    .collect();
                match names.split_last() {
                    Some((last, [])) => last.to_string(),
                    Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                    None => "nothing".to_string(),
                }
            };
            report.native.push(format!(
                "the Kueue labels are the queue's: a {} whose {} still differs after the mutation is a violation, as is a {} carrying a different one",
                managed(crate::kinds::Kueue::by_labels),
                labels.join(", "),
                managed(crate::kinds::Kueue::as_pod),
            ));
        }
        let visible_devices =
            mutations::visible_devices_violations(queue, "variables.specs", "variables.child");
        if visible_devices.is_some() {
            report.native.push(
                "a tenant's own NVIDIA_VISIBLE_DEVICES other than void, in every container (rule visibleDevices.tenantValue)".into(),
            );
        }
        if !cel.checks.is_empty() || kueue.is_some() || visible_devices.is_some() {
            let enforcement = queue.config.limits.enforcement;
            let name = format!("{base}-limits");
            let mut checks: Vec<(Identifier, &'static Rule)> = cel.checks.clone();
            let mut named = vec![
                (ident!("specs"), specs.clone()),
                (ident!("child"), child.clone()),
                enters.clone(),
            ];
            named.extend(cel.variables.iter().cloned());
            if let Some(expression) = &kueue {
                let var = ident!("kueueLabels");
                checks.push((var.clone(), rules::KUEUE_LABELS));
                named.push((var, expression.clone()));
            }
            if let Some(expression) = &visible_devices {
                let var = ident!("visibleDevices");
                checks.push((var.clone(), rules::VISIBLE_DEVICES_TENANT_VALUE));
                named.push((var, expression.clone()));
            }
            let all: Vec<String> = checks.iter().map(|(c, _)| c.reference()).collect();
            named.push((ident!("violations"), all.join(" + ")));
            let docs_url = policy.config.docs_url.as_deref();
            if let Some(url) = docs_url {
                named.push((ident!("ruleLinks"), rule_links(url, &checks)));
            }
            let variables = policy_variables(&named);
            report
                .native
                .extend(cel.described.iter().map(|d| format!("limit: {d}")));
            // The limits judge a CREATE, and an UPDATE judged as one: one that brings the
            // workload into the queue (it was no launch workload, or another queue's), as the
            // webhook judges it. Where an exemption can be inherited, launchgate's mark on a
            // workload is refused on CREATE and on an UPDATE that brings the workload into the
            // queue: nothing in the native policies writes it, so they cannot tell launchgate's
            // from a tenant's. An UPDATE of a workload launchgate marked exempt from a
            // requester no exemption covers is judged as that requester's CREATE.
            let marks = select::unproven_marks(policy);
            report.native.push(
                "an UPDATE that brings a workload into the queue (it was no launch workload, or another queue's) is judged as a CREATE, on every check above".into(),
            );
            let mut validations = vec![json!({
                "expression": format!("!{as_create} || size(variables.violations) == 0"),
                "messageExpression": match docs_url {
                    Some(_) => "variables.violations.join('; ') + variables.ruleLinks",
                    None => "variables.violations.join('; ')",
                },
                "reason": "Forbidden",
            })];
            if let Some((expression, message)) = &marks {
                let message = match docs_url {
                    Some(url) => format!(
                        "{message}{NATIVE_LINKS_SEPARATOR}{}",
                        rules::links_line(url, &[rules::EXEMPTIONS_UNEARNED_MARK.id])
                    ),
                    None => message.clone(),
                };
                validations.push(json!({
                    "expression": expression,
                    "message": message,
                    "reason": "Forbidden",
                }));
                report.native.push(
                    "a launchgate.io/exempted-by mark on a workload (not a verified controller's child) is refused on CREATE and on an UPDATE that brings it into the queue (rule exemptions.unearnedMark)".into(),
                );
                report.native.push(
                    "an UPDATE of a workload carrying launchgate.io/exempted-by from a requester no exemption covers (not a verified controller's child, not match.workloadUpdaters) is judged as that requester's CREATE: the limits, and the mark refused".into(),
                );
            }
            objects.push(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": metadata(&name, queue, options),
                "spec": {
                    // A deny queue fails closed; a warn or audit queue never blocks a run.
                    "failurePolicy": if enforcement == Enforcement::Deny { "Fail" } else { "Ignore" },
                    "matchConstraints": {"resourceRules": resource_rules(&["CREATE", "UPDATE"])},
                    "matchConditions": match_conditions(policy, queue),
                    "variables": variables,
                    "validations": validations,
                },
            }));
            objects.push(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": metadata(&name, queue, options),
                "spec": binding_spec(&name, options, Some(match enforcement {
                    Enforcement::Deny => "Deny",
                    Enforcement::Warn => "Warn",
                    Enforcement::Audit => "Audit",
                })),
            }));
            report.objects.push(name);
        }
        queues.push(report);
    }
    Compiled {
        objects,
        report: Report {
            kinds: select::kinds().map(|k| k.as_str()).collect(),
            webhook_only: everywhere(),
            queues,
        },
    }
}

/// The objects of a set (`--native-policies=<set>`) of `capacity` slots for `policy`, by
/// [`key_of`]: each queue's compiled objects in the slot it holds in the cluster (`existing`,
/// from [`existing_slots`]) or the lowest free one, and every other object of every slot
/// dormant — `4 × capacity` objects, exactly the names of [`slot_objects`]. An error (the
/// [`check_capacity`] message) when the config has more queues than slots.
pub fn slot_set(
    policy: &Policy,
    set: &str,
    capacity: usize,
    namespace_selector: Option<&Value>,
    config_hash: Option<&str>,
    existing: &BTreeMap<String, usize>,
) -> Result<BTreeMap<(String, String), Value>, String> {
    let assigned = assign_slots(policy.queues.keys().map(String::as_str), existing, capacity)?;
    let options = Options {
        config_hash: config_hash.map(str::to_string),
        policy_set: Some(set.to_string()),
        namespace_selector: namespace_selector.cloned(),
        slots: Some(assigned),
    };
    let mut objects: BTreeMap<(String, String), Value> = compile(policy, &options)
        .objects
        .into_iter()
        .map(|object| (key_of(&object), object))
        .collect();
    for (slot, kind, name) in slot_objects(set, capacity) {
        objects
            .entry((kind.kind.to_string(), name.clone()))
            .or_insert_with(|| dormant(set, slot, kind, &name));
    }
    Ok(objects)
}

impl Report {
    /// The report as Markdown: per queue, what runs natively and what a webhook outage costs.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "Native policies cover: {}.\n\nIn the webhook only, for every queue:\n",
            self.kinds.join(", ")
        ));
        for gap in &self.webhook_only {
            out.push_str(&format!("- {}: {}\n", gap.what, gap.why));
        }
        for q in &self.queues {
            out.push_str(&format!(
                "\n## queue {}\n\nNative ({}):\n",
                q.queue,
                q.objects.join(", ")
            ));
            for n in &q.native {
                out.push_str(&format!("- {n}\n"));
            }
            if q.webhook_only.is_empty() {
                out.push_str("\nWebhook only: nothing else.\n");
            } else {
                out.push_str("\nWebhook only (not done while the webhook is down):\n");
                for gap in &q.webhook_only {
                    out.push_str(&format!("- {}: {}\n", gap.what, gap.why));
                }
            }
        }
        out
    }
}

/// What goes between a native denial's message and its links: the webhook's denial puts them
/// on a line of their own, but the API server refuses a policy message with a line break (and
/// replaces a computed one that has one).
const NATIVE_LINKS_SEPARATOR: &str = " — ";

/// The CEL for what a native denial ends with when the config says where the documentation
/// site is (`docsUrl`): ` — see ` and a link to the section of each rule whose check found
/// something, in the checks' order and once each — the webhook denial's last line
/// ([`rules::links_line`]).
fn rule_links(docs_url: &str, checks: &[(Identifier, &'static Rule)]) -> String {
    let mut rules: Vec<&'static Rule> = Vec::new();
    for (_, rule) in checks {
        if !rules.iter().any(|r| r.id == rule.id) {
            rules.push(rule);
        }
    }
    let links: Vec<String> = rules
        .iter()
        .map(|rule| {
            let fired: Vec<String> = checks
                .iter()
                .filter(|(_, r)| r.id == rule.id)
                .map(|(c, _)| format!("size({}) > 0", c.reference()))
                .collect();
            format!(
                "({} ? [{}] : [])",
                fired.join(" || "),
                crate::cel::lit(&rules::link(docs_url, rule.id))
            )
        })
        .collect();
    format!(
        "{} + ({}).join(', ')",
        crate::cel::lit(&format!("{NATIVE_LINKS_SEPARATOR}{}", rules::LINKS_LEAD)),
        links.join(" + ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A native denial ends with the webhook's links line: each rule whose check found
    /// something, once, in the checks' order.
    #[test]
    fn a_denial_links_each_rule_that_found_something_once() {
        use crate::native::eval::{V, eval};
        let checks = [
            (ident!("c0"), rules::LIMITS_VARIABLES),
            (ident!("c1"), rules::LIMITS_VARIABLES),
            (ident!("c2"), rules::LIMITS_TOTALS),
            (ident!("kueueLabels"), rules::KUEUE_LABELS),
        ];
        let url = "https://d.example/lg/";
        let expression = rule_links(url, &checks);
        let run = |found: [&[&str]; 4]| {
            let named = checks
                .iter()
                .zip(found)
                .map(|((c, _), lines)| {
                    let lines = lines.iter().map(|l| V::Str(l.to_string())).collect();
                    (V::Str(c.as_str().to_string()), V::List(lines))
                })
                .collect();
            eval(&expression, &[("variables", V::Map(named))]).unwrap()
        };
        let webhook = |ids: &[&str]| {
            V::Str(format!(
                "{NATIVE_LINKS_SEPARATOR}{}",
                rules::links_line(url, ids)
            ))
        };
        assert_eq!(
            run([&[], &["a", "b"], &["over"], &["label"]]),
            webhook(&["limits.variables", "limits.totals", "kueue.labels"])
        );
        assert_eq!(
            run([&["a"], &["b"], &[], &[]]),
            webhook(&["limits.variables"])
        );
        assert_eq!(run([&[], &[], &[], &["label"]]), webhook(&["kueue.labels"]));
    }

    #[test]
    fn names_are_dns_subdomains() {
        assert_eq!(slug("gpu-queue"), "gpu-queue");
        let s = slug("acme/Team A");
        assert!(s.starts_with("acme-team-a-"), "{s}");
        assert!(
            s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_ne!(slug("a/b"), slug("a-b"));
    }

    #[test]
    fn slot_named_objects_bind_their_own_policies() {
        let policy = Policy::embedded_default();
        let slots: BTreeMap<String, usize> = policy
            .queues
            .keys()
            .enumerate()
            .map(|(i, k)| (k.clone(), i + 3))
            .collect();
        let compiled = compile(
            &policy,
            &Options {
                policy_set: Some("lg".into()),
                slots: Some(slots.clone()),
                ..Options::default()
            },
        );
        let allowed = slot_names("lg", 3 + slots.len());
        assert!(!compiled.objects.is_empty());
        for object in &compiled.objects {
            let name = object["metadata"]["name"].as_str().unwrap();
            assert!(allowed.iter().any(|a| a == name), "{name}");
            let key = object["metadata"]["annotations"][QUEUE_KEY_ANNOTATION]
                .as_str()
                .unwrap();
            let slot = slots[key];
            assert_eq!(slot_of("lg", name), Some(slot));
            assert_eq!(
                object["metadata"]["labels"][POLICY_SLOT_LABEL],
                format!("q{slot}")
            );
            if let Some(bound) = object["spec"]["policyName"].as_str() {
                assert_eq!(bound, name);
            }
        }
    }

    #[test]
    fn the_example_policy_compiles_with_a_report() {
        let compiled = compile(&Policy::embedded_default(), &Options::default());
        let kinds: Vec<&str> = compiled
            .objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "MutatingAdmissionPolicy",
                "MutatingAdmissionPolicyBinding",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding"
            ]
        );
        let q = &compiled.report.queues[0];
        assert!(
            q.webhook_only
                .iter()
                .any(|g| g.what == "queues.gpu-queue.pytorch")
        );
        assert!(compiled.report.to_markdown().contains("## queue gpu-queue"));
    }

    /// The built-in queue with every limit set (namespaces, registries, deadline, totals).
    fn every_limit() -> Policy {
        let mut config: Value =
            serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).expect("built-in config");
        let limits = &mut config["queues"]["gpu-queue"]["limits"];
        limits["allowedNamespaces"] = json!(["wandb", "ml"]);
        limits["allowedRegistries"] = json!(["docker.io/acme"]);
        limits["maxActiveDeadlineSeconds"] = json!(86400);
        limits["totals"] = json!({"nvidia.com/gpu": {"maximum": 8}});
        Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).expect("policy")
    }

    #[test]
    fn every_variable_name_is_one_the_api_server_accepts() {
        let compiled = compile(&every_limit(), &Options::default());
        let mut names = Vec::new();
        for object in &compiled.objects {
            for v in object["spec"]["variables"].as_array().into_iter().flatten() {
                let name = v["name"].as_str().unwrap();
                assert!(
                    crate::cel::is_identifier(name),
                    "{name:?} in {}",
                    object["metadata"]["name"]
                );
                names.push(name.to_string());
            }
        }
        assert!(names.iter().any(|n| n == "allowedNamespaces"), "{names:?}");
        let limits = compiled
            .objects
            .iter()
            .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
            .unwrap();
        let all = limits["spec"]["variables"].as_array().unwrap();
        assert!(
            all.last().unwrap()["expression"]
                .as_str()
                .unwrap()
                .contains("variables.allowedNamespaces")
        );
    }

    /// Every place a compiled expression walks a keyed map of pod templates (a PyTorchJob's
    /// replica types): it walks the sorted keys, never the map itself (CEL iterates a map in
    /// no defined order).
    #[test]
    fn no_expression_walks_a_keyed_map_in_map_order() {
        let policy = every_limit();
        let mut texts: Vec<String> = compile(&policy, &Options::default())
            .objects
            .iter()
            .map(|o| o.to_string())
            .collect();
        let settings = webhooks::Settings::default();
        texts.extend(
            webhooks::configurations(&policy, &settings)
                .unwrap()
                .iter()
                .map(|o| o.to_string()),
        );
        let maps: Vec<String> = select::kinds()
            .flat_map(|k| k.spec().positions)
            .filter(|p| matches!(p.holders, crate::kinds::Holders::Keyed(_)))
            .map(|p| format!("object.{}", p.holders.path().join(".")))
            .collect();
        assert!(!maps.is_empty());
        let mut walks = 0;
        for map in &maps {
            let sorted = select::keyed_order(map);
            for text in &texts {
                for (at, _) in text.match_indices(&format!("{map}.")) {
                    let rest = &text[at + map.len()..];
                    if ["filter(", "map(", "exists(", "all(", "exists_one("]
                        .iter()
                        .any(|m| rest[1..].starts_with(m))
                    {
                        assert!(
                            text[at..].starts_with(&sorted),
                            "map-order walk: {}",
                            &text[at..at + 120]
                        );
                        walks += 1;
                    }
                }
            }
        }
        assert!(walks > 0);
    }

    /// Each rule of a queue's settings that native policies cannot carry, with the settings
    /// (merged into the built-in queue) that make it deny there.
    const WEBHOOK_ONLY_TRIGGERS: &[(&Rule, &str)] = &[
        (rules::LIMITS_STRICT, "{limits: {strict: true}}"),
        // The built-in queue's `gpus` variable bounds GPUs.
        (rules::ACCELERATORS_UNCOUNTED, "{}"),
        (
            rules::LIMITS_UNVERIFIABLE_RUNTIME,
            "{limits: {totals: {nvidia.com/gpu: {maximum: 16}}}}",
        ),
        (
            rules::LIMITS_TRAINING_RUNTIMES,
            "{guardrails: {costCeiling: {maxGpuHours: 16}}}",
        ),
        (rules::GUARDRAILS_GANG, "{guardrails: {gang: deny}}"),
        (
            rules::GUARDRAILS_COST_CEILING,
            "{guardrails: {costCeiling: {maxGpuHours: 16}}}",
        ),
        // On in the built-in queue.
        (rules::PYTORCH_ON_UNWIRABLE, "{}"),
    ];

    /// A rule native policies cannot carry keeps its queue on the webhook (in `hybrid` mode
    /// the webhook still judges it; in `native` mode nothing does), and the report says
    /// which: every such rule of the table, where a queue's settings make it deny, is named
    /// with its reason under that queue — or, for a rule no queue setting turns on, for every
    /// queue. A rule added to the table without a CEL form fails here until it is.
    #[test]
    fn every_rule_native_policies_cannot_carry_is_named_in_the_report() {
        let mut checked = 0;
        for rule in rules::RULES {
            let Some(why) = rule.native.reason() else {
                continue;
            };
            if !rule.config_key.starts_with("queues.") {
                let report = compile(&Policy::embedded_default(), &Options::default()).report;
                let named = format!("rule {}", rule.id);
                assert!(
                    report
                        .webhook_only
                        .iter()
                        .any(|g| g.what == named && g.why == why),
                    "{named} is not in the report: {:?}",
                    report.webhook_only
                );
                checked += 1;
                continue;
            }
            let (_, settings) = WEBHOOK_ONLY_TRIGGERS
                .iter()
                .find(|(r, _)| r.id == rule.id)
                .unwrap_or_else(|| panic!("{}: no settings that turn it on here", rule.id));
            let mut config: Value =
                serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
            let queue = &mut config["queues"]["gpu-queue"];
            merge(queue, serde_yaml::from_str(settings).unwrap());
            let policy = Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).unwrap();
            let queue = policy.queue("gpu-queue").unwrap();
            assert!(
                policy.deny_rules(queue).contains(rule),
                "{settings} does not make {} deny",
                rule.id
            );
            let report = compile(&policy, &Options::default()).report;
            // Named by its reason and its config key (`queues.gpu-queue.guardrails.costCeiling`
            // for `….costCeiling.maxGpuHours`).
            let head = |s: &str| s.split([' ', ',']).next().unwrap_or_default().to_string();
            let key = head(&rule.config_key.replace("<queue>", "gpu-queue"));
            let named = report.queues[0]
                .webhook_only
                .iter()
                .any(|g| g.why == why && key.starts_with(&head(&g.what)));
            assert!(
                named,
                "{} ({settings}) is not named under its queue: {:?}",
                rule.id, report.queues[0].webhook_only
            );
            checked += 1;
        }
        assert!(checked >= WEBHOOK_ONLY_TRIGGERS.len() + 3, "{checked}");
    }

    /// `patch` merged into `into`, map by map.
    fn merge(into: &mut Value, patch: Value) {
        match (into, patch) {
            (Value::Object(into), Value::Object(patch)) => {
                for (k, v) in patch {
                    merge(into.entry(k).or_insert(Value::Null), v);
                }
            }
            (into, patch) => *into = patch,
        }
    }

    #[test]
    fn the_subset_turns_off_what_stays_in_the_webhook() {
        let subset = native_subset(&Policy::embedded_default());
        let q = &subset.queues["gpu-queue"];
        assert!(!q.pytorch.enabled);
        assert!(!q.cache.as_ref().unwrap().enabled);
        assert!(q.guardrails.shared_memory.is_none());
        assert!(Policy::from_config(subset).is_ok());
    }
}
