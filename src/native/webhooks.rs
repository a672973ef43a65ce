//! The webhook configurations launchgate registers itself (`serve --register-webhooks`): the
//! chart's `MutatingWebhookConfiguration` and `ValidatingWebhookConfiguration` (its rules,
//! selectors, timeouts and launch-workload `matchConditions`), with the validating webhook split
//! by the queue a request resolves to, so each queue gets the failure policy its rules imply: a
//! queue with any deny rule ([`crate::policy::Policy::deny_rules`]) fails closed, a queue whose
//! every rule only warns or audits fails open.
//!
//! A request's queue is resolved in CEL exactly as the native policies resolve it
//! ([`super::select::queue_key`]: queue label, container env, namespace default, default queue).
//! What CEL cannot resolve the way the webhook does — a TrainJob whose queue may come from its
//! trainer's env — goes to the fail-closed webhook while any queue denies.
//!
//! A PyTorchJob's `scale` subresource has a validating webhook of its own ([`scale_hook`]): its
//! Scale carries no labels, so no CEL can tell a launch PyTorchJob's from another team's, and
//! launchgate judges it against the PyTorchJob it scales (cluster lookups). It fails open, so an
//! outage never stops another team's scaling.

use super::select;
use crate::cel;
use crate::kinds::{Intermediate, Through};
use crate::policy::Policy;
use crate::workload::WorkloadKind;
use base64::Engine;
use serde_json::{Value, json};

/// Where the API server sends admission requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Service in the cluster (the chart's).
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its port.
        port: u16,
    },
    /// A URL (local clusters, tests): `/mutate` and `/validate` are appended.
    Url(String),
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    /// `namespace/name:port` (a Service).
    fn from_str(text: &str) -> Result<Endpoint, String> {
        let expected = || format!("expected namespace/name:port, got {text:?}");
        let (namespace, rest) = text.split_once('/').ok_or_else(expected)?;
        let (name, port) = rest.rsplit_once(':').ok_or_else(expected)?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("invalid port {port:?} in {text:?}"))?;
        if namespace.is_empty() || name.is_empty() || port == 0 {
            return Err(expected());
        }
        Ok(Endpoint::Service {
            namespace: namespace.into(),
            name: name.into(),
            port,
        })
    }
}

/// The workload kinds an admission rule can cover, by the chart's names (`webhook.rules`):
/// every kind, named by its descriptor ([`crate::kinds::KindSpec::webhook_rule`]).
pub fn rule_names() -> impl Iterator<Item = (&'static str, WorkloadKind)> {
    WorkloadKind::all().map(|k| (k.spec().webhook_rule, k))
}

/// The resources a kind's admission rules cover: its own, and the subresources that are
/// judged.
fn resources(kind: WorkloadKind) -> Vec<String> {
    let resource = kind.api_resource().2;
    std::iter::once(resource.to_string())
        .chain(
            kind.spec()
                .subresources
                .iter()
                .map(|sub| format!("{resource}/{sub}")),
        )
        .collect()
}

/// The kinds as the chart reads them (its `files/kinds.json`): per kind, in the registry's
/// order, its `webhook.rules` name, API group, version and resource, the resources its admission
/// rules cover ([`resources`]) and its scale subresource, which the scale webhook covers
/// ([`scale_hook`]; `null` for a kind without one). The chart's webhook rules, its scale
/// webhook and the audit's read access are built from it, as the server builds its own
/// ([`configurations`]).
pub fn chart_kinds() -> Value {
    let kinds = rule_names().map(|(rule, kind)| {
        let (group, version, resource) = kind.api_resource();
        json!({
            "rule": rule,
            "group": group,
            "version": version,
            "resource": resource,
            "resources": resources(kind),
            // The kind's scale subresource (`<resource>/scale`), under that name.
            (crate::kinds::SCALE_SUBRESOURCE): kind.scale_resource(),
        })
    });
    Value::Array(kinds.collect())
}

/// The intermediate owners as the chart reads them (its `files/intermediates.json`): per
/// [`Intermediate`], its API group, version and resource, the `webhook.rules` names of the kinds
/// whose pods come through it (its webhook is rendered when one of them is on), and the CEL
/// test for "its pod template carries one of their marks" ([`intermediate_condition`]).
pub fn chart_intermediates() -> Value {
    Value::Array(
        Intermediate::all()
            .map(|via| {
                json!({
                    "group": via.group,
                    "version": via.version,
                    "resource": via.resource,
                    "rules": through(via).map(|(k, _)| k.spec().webhook_rule).collect::<Vec<_>>(),
                    "condition": intermediate_condition(via),
                })
            })
            .collect(),
    )
}

/// The kinds whose pods come through `via`, each with the keys of its mark.
fn through(
    via: &'static Intermediate,
) -> impl Iterator<Item = (WorkloadKind, &'static [&'static str])> {
    WorkloadKind::all().flat_map(move |k| {
        k.spec().makes.iter().filter_map(move |m| match m.through {
            Through::Owner(v) if std::ptr::eq(v, via) => Some((k, m.mark)),
            _ => None,
        })
    })
}

/// The CEL test for "the request is for `via` and its pod template carries the mark of a kind
/// whose pods come through it", the object the intermediate owners' webhook is sent.
fn intermediate_condition(via: &'static Intermediate) -> String {
    let marks: Vec<&str> = through(via)
        .flat_map(|(_, keys)| keys.iter().copied())
        .collect();
    let mut path = String::from("object");
    let mut present = Vec::new();
    for step in via.template.iter().chain(&["metadata"]) {
        path = format!("{path}.{step}");
        present.push(format!("has({path})"));
    }
    let carries = |field: &str| {
        format!(
            "(has({path}.{field}) && {}.exists(k, k in {path}.{field}))",
            cel::str_list(&marks)
        )
    };
    format!(
        "request.kind.group == {} && request.kind.kind == {} && {} && ({} || {})",
        cel::lit(via.group),
        cel::lit(via.kind),
        present.join(" && "),
        carries("labels"),
        carries("annotations"),
    )
}

/// The validating webhook of the intermediate owners, `validate-intermediates.*`: a CREATE, or
/// an UPDATE that changes the spec, of an intermediate owner whose pod template carries the
/// mark of a kind whose pods come through it — of `vias`, the intermediates of the kinds the
/// rules cover — judged by [`crate::policy::intermediate_guard`]. It fails as `failure` says:
/// closed where the validating webhook is and a queue denies, since a forged owner created
/// during an outage would make pods that pass as verified ever after; open when every queue
/// only warns. Without `matchConditions` it would be sent every StatefulSet, so it fails open
/// then.
fn intermediate_hook(
    base: &Value,
    name: &str,
    vias: &[&'static Intermediate],
    failure: &str,
    match_conditions: bool,
) -> Value {
    let mut hook = base.clone();
    hook["name"] = json!(split_name(name, "intermediates"));
    hook["failurePolicy"] = json!(if match_conditions { failure } else { "Ignore" });
    hook["rules"] = vias
        .iter()
        .map(|via| {
            json!({
                "apiGroups": [via.group],
                "apiVersions": [via.version],
                "resources": [via.resource],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            })
        })
        .collect();
    if let Some(h) = hook.as_object_mut() {
        h.remove("objectSelector");
        h.remove("matchConditions");
    }
    if match_conditions {
        // One test as it is; several, each parenthesised (as the chart joins them).
        let carries = match vias {
            [one] => intermediate_condition(one),
            _ => vias
                .iter()
                .map(|v| format!("({})", intermediate_condition(v)))
                .collect::<Vec<_>>()
                .join(" || "),
        };
        hook["matchConditions"] = json!([
            condition("intermediate", &carries),
            condition("spec-changed", INTERMEDIATE_SPEC_CHANGED),
        ]);
    }
    hook
}

/// The validating webhook of the LaunchQueues, `validate-launchqueues.*`: a LaunchQueue
/// created or changed is refused when its spec would not hold as a queue (its key paths named),
/// failing open so an outage never blocks the platform team's own recovery (the server then
/// keeps the last good spec of a LaunchQueue that does not hold). LaunchQueues are
/// cluster-scoped: the namespace selector, kept as every webhook's, never skips one.
fn launchqueue_hook(base: &Value, name: &str) -> Value {
    use crate::policy::launchqueue::{GROUP, PLURAL, VERSION};
    let mut hook = base.clone();
    hook["name"] = json!(split_name(name, PLURAL));
    hook["failurePolicy"] = json!("Ignore");
    hook["rules"] = json!([{
        "apiGroups": [GROUP],
        "apiVersions": [VERSION],
        "resources": [PLURAL],
        "operations": ["CREATE", "UPDATE"],
        "scope": "Cluster",
    }]);
    if let Some(h) = hook.as_object_mut() {
        for key in ["objectSelector", "matchConditions"] {
            h.remove(key);
        }
    }
    hook
}

/// An UPDATE of an intermediate owner that leaves its spec as it was (the garbage collector's,
/// a label's) is anyone's.
const INTERMEDIATE_SPEC_CHANGED: &str =
    "request.operation != 'UPDATE' || !has(oldObject.spec) || object.spec != oldObject.spec";

/// Where the chart's `launch-workload` condition looks for labels (its
/// `files/label-carriers.json`): the object and every pod template of every kind, the CEL list
/// [`launch_condition`] tests the labels of, so the chart's condition is the server's.
pub fn chart_label_carriers() -> Value {
    json!({"carriers": select::carriers(select::Root::Object)})
}

/// Everything about the webhooks the config does not say (what the chart passes).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The name of both configuration objects.
    pub name: String,
    /// Where the API server sends requests.
    pub endpoint: Endpoint,
    /// PEM of the CA(s) that sign the serving certificate.
    pub ca_bundle: String,
    /// Merged into every webhook's namespaceSelector (the chart's exclusions).
    pub namespace_selector: Option<Value>,
    /// Every webhook's objectSelector.
    pub object_selector: Option<Value>,
    /// Seconds the API server waits for an answer.
    pub timeout_seconds: u8,
    /// `Equivalent` or `Exact`.
    pub match_policy: String,
    /// The mutating webhook, when registered.
    pub mutate: Option<MutateHook>,
    /// The validating webhooks, when registered.
    pub validate: Option<ValidateHook>,
    /// The server reads LaunchQueues (`serve --launchqueues`): the validating webhook checks
    /// one created or changed ([`launchqueue_hook`]).
    pub launch_queues: bool,
    /// The kinds the rules cover (chart names, [`rule_names`]); empty: all.
    pub kinds: Vec<String>,
    /// Labels marking a launch workload; empty: the config's launch and queue labels.
    pub launch_labels: Vec<String>,
    /// Send only launch workloads (`matchConditions`); off for API servers without them.
    pub match_conditions: bool,
    /// Extra `{name, expression}` conditions appended to the built-in ones.
    pub extra_conditions: Vec<Value>,
}

/// The mutating webhook.
#[derive(Debug, Clone)]
pub struct MutateHook {
    /// Its name.
    pub name: String,
    /// `Ignore` or `Fail`.
    pub failure_policy: String,
    /// `IfNeeded` or `Never`.
    pub reinvocation_policy: String,
}

/// The validating webhook(s).
#[derive(Debug, Clone)]
pub struct ValidateHook {
    /// The name; the split webhooks insert `-deny` / `-warn` after its first label.
    pub name: String,
    /// True: requests of queues with a deny rule fail closed, the others open. False: all fail
    /// open.
    pub fail_closed: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            name: "launchgate".into(),
            endpoint: Endpoint::Url("https://127.0.0.1:8443".into()),
            ca_bundle: String::new(),
            namespace_selector: None,
            object_selector: None,
            timeout_seconds: 5,
            match_policy: "Equivalent".into(),
            mutate: Some(MutateHook {
                name: "mutate.launchgate.io".into(),
                failure_policy: "Ignore".into(),
                reinvocation_policy: "IfNeeded".into(),
            }),
            validate: Some(ValidateHook {
                name: "validate.launchgate.io".into(),
                fail_closed: true,
            }),
            kinds: Vec::new(),
            launch_labels: Vec::new(),
            match_conditions: true,
            launch_queues: false,
            extra_conditions: Vec::new(),
        }
    }
}

/// `validate.launchgate.io` with `-deny` → `validate-deny.launchgate.io`.
pub fn split_name(name: &str, suffix: &str) -> String {
    match name.split_once('.') {
        Some((first, rest)) => format!("{first}-{suffix}.{rest}"),
        None => format!("{name}-{suffix}"),
    }
}

/// The admission rules: CREATE and UPDATE of the chosen kinds (with the subresources that
/// change what the limits cover: ephemeral containers, pod resize; a PyTorchJob's scale has a
/// webhook of its own, [`scale_hook`]).
fn rules(kinds: &[String]) -> Result<Value, String> {
    let out = rule_names()
        .filter(|(rule, _)| kinds.is_empty() || kinds.iter().any(|k| k == rule))
        .map(|(_, kind)| admission_rule(kind, resources(kind), &["CREATE", "UPDATE"]))
        .collect();
    if let Some(unknown) = kinds
        .iter()
        .find(|k| !rule_names().any(|(n, _)| n == k.as_str()))
    {
        let known: Vec<&str> = rule_names().map(|(n, _)| n).collect();
        return Err(format!(
            "unknown webhook kind {unknown:?} (one of {})",
            known.join(", ")
        ));
    }
    Ok(Value::Array(out))
}

/// A namespaced admission rule: `operations` on `resources` of `kind`'s API group and version.
fn admission_rule(kind: WorkloadKind, resources: Vec<String>, operations: &[&str]) -> Value {
    let (group, version, _) = kind.api_resource();
    json!({
        "apiGroups": [group],
        "apiVersions": [version],
        "resources": resources,
        "operations": operations,
        "scope": "Namespaced",
    })
}

/// The CEL test for the launch workloads the webhooks are sent.
fn launch_condition(policy: &Policy, settings: &Settings) -> String {
    if settings.launch_labels.is_empty() {
        select::is_launch(policy, select::Root::Object)
    } else {
        select::carries_label(&settings.launch_labels, select::Root::Object)
    }
}

/// The validating webhook of the scale subresources, `validate-scale.*`: every Scale UPDATE of
/// `scaled` (the registered kinds with a scale subresource), judged against the workload it
/// scales, failing open. A Scale carries no labels, so neither `matchConditions` nor the object
/// selector can tell a launch workload's Scale from another team's; fail-closed, an outage
/// would stop every team's scaling.
fn scale_hook(base: &Value, name: &str, scaled: &[WorkloadKind]) -> Value {
    let mut hook = base.clone();
    hook["name"] = json!(split_name(name, crate::kinds::SCALE_SUBRESOURCE));
    hook["failurePolicy"] = json!("Ignore");
    hook["rules"] = scaled
        .iter()
        .filter_map(|&k| Some(admission_rule(k, vec![k.scale_resource()?], &["UPDATE"])))
        .collect();
    if let Some(h) = hook.as_object_mut() {
        h.remove("matchConditions");
        h.remove("objectSelector");
    }
    hook
}

/// The label keys whose change on an UPDATE is sent to the webhooks: the labels that mark a
/// launch workload (`settings.launch_labels`, else the config's launch and queue labels) and
/// every label that names its queue (`match.queueNameLabels` too: relabelling a launch
/// workload's `queue` moves it to another queue), in order, without repeats.
fn decision_labels(policy: &Policy, settings: &Settings) -> Vec<String> {
    let rules = &policy.config.match_rules;
    let keys: Vec<&String> = if settings.launch_labels.is_empty() {
        rules.deciding_labels()
    } else {
        settings
            .launch_labels
            .iter()
            .chain(rules.naming_labels())
            .collect()
    };
    let mut out: Vec<String> = Vec::new();
    for k in keys {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    out
}

/// The prefix of the Kueue labels a queue's `kueue` settings govern (queue name, priority
/// class, maximum execution time).
const KUEUE_LABELS: &str = "kueue.x-k8s.io/";

/// The CEL test for "this request can change what launchgate judges": every CREATE; every
/// UPDATE through a subresource (ephemeral containers, a resize, a Scale); an UPDATE of the
/// object itself only when its `spec` changes or a label that decides whether it is a launch
/// workload and its queue (`keys`) or its Kueue settings (`kueue.x-k8s.io/*`) does. Everything
/// else — the Job controller removing its `batch.kubernetes.io/job-tracking` finalizer, any
/// other label or annotation change — is never sent, so a webhook outage cannot block it. The
/// chart writes the same condition (`launchgate.celRelevantUpdate`).
pub fn relevant_update<S: AsRef<str>>(keys: &[S]) -> String {
    let value = |o: &str| {
        format!(
            "(has({o}.metadata.labels) && k in {o}.metadata.labels ? [{o}.metadata.labels[k]] : [])"
        )
    };
    let changed = format!("{} != {}", value("object"), value("oldObject"));
    let kueue = |o: &str| {
        format!(
            "(has({o}.metadata.labels) && {o}.metadata.labels.exists(k, k.startsWith({}) && {changed}))",
            cel::lit(KUEUE_LABELS)
        )
    };
    format!(
        "request.operation != 'UPDATE' || (has(request.subResource) && request.subResource != '') || !has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec || {}.exists(k, {changed}) || {} || {}",
        cel::str_list(keys),
        kueue("object"),
        kueue("oldObject"),
    )
}

/// The CEL test for "this request fails closed": it resolves to a queue with a deny rule
/// ([`Policy::fails_closed`]: a rule of the table denies there), or
/// CEL cannot resolve its queue the way the webhook does. `None` when no queue denies.
pub fn deny_queue_condition(policy: &Policy) -> Option<String> {
    let deny: Vec<&str> = policy
        .queues
        .values()
        .filter(|q| policy.fails_closed(q))
        .map(|q| q.key.as_str())
        .collect();
    if deny.is_empty() {
        return None;
    }
    let rules = &policy.config.match_rules;
    // The containers of a kind whose pods come from a runtime (a TrainJob's) live in the
    // runtime: their env is not read here. The entity env matters only when a queue is
    // configured under an entity; the queue env only when no queue label names the queue.
    let entity_scoped = policy.queues.values().any(|q| q.entity.is_some());
    let from_env = if rules.queue_entity_env.is_some() && entity_scoped {
        Some("true".to_string())
    } else if rules.queue_env.is_some() {
        Some(format!(
            "{} == ''",
            select::label_value(policy, select::Root::Object)
        ))
    } else {
        None
    };
    let runtime_kinds: Vec<String> = WorkloadKind::all()
        .filter(|k| k.spec().runtime.is_some())
        .map(WorkloadKind::cel_test)
        .collect();
    let mut parts = Vec::new();
    if let Some(unknown) = from_env.filter(|_| !runtime_kinds.is_empty()) {
        parts.push(format!("({} && {unknown})", cel::any(&runtime_kinds)));
    }
    parts.push(format!(
        "{} in {}",
        select::queue_key(policy, select::Root::Object),
        cel::str_list(deny)
    ));
    Some(cel::any(&parts))
}

fn condition(name: &str, expression: &str) -> Value {
    json!({"name": name, "expression": expression})
}

/// The label naming the installation a webhook configuration belongs to (the server's
/// `--register-webhooks` name, the chart's full name), as `launchgate.io/policy-set` names a
/// native policy set's: what an uninstall deletes by, without touching another installation's.
pub const WEBHOOK_SET_LABEL: &str = "launchgate.io/webhook-set";

/// The `MutatingWebhookConfiguration` and `ValidatingWebhookConfiguration` for `policy`
/// (those `settings` enables), for server-side apply. An unknown kind name is an error.
pub fn configurations(policy: &Policy, settings: &Settings) -> Result<Vec<Value>, String> {
    let rules = rules(&settings.kinds)?;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&settings.ca_bundle);
    let client_config = |path: &str| match &settings.endpoint {
        Endpoint::Service {
            namespace,
            name,
            port,
        } => json!({
            "service": {"namespace": namespace, "name": name, "path": path, "port": port},
            "caBundle": ca_bundle,
        }),
        Endpoint::Url(base) => json!({
            "url": format!("{}{path}", base.trim_end_matches('/')),
            "caBundle": ca_bundle,
        }),
    };
    let launch = launch_condition(policy, settings);
    let update = relevant_update(&decision_labels(policy, settings));
    let hook = |name: &str, path: &str, failure: &str, conditions: Vec<Value>| {
        let mut h = json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "timeoutSeconds": settings.timeout_seconds,
            "failurePolicy": failure,
            "matchPolicy": settings.match_policy,
            "clientConfig": client_config(path),
            "rules": rules,
            "namespaceSelector": settings.namespace_selector.clone().unwrap_or_else(|| json!({})),
        });
        if let Some(selector) = &settings.object_selector {
            h["objectSelector"] = selector.clone();
        }
        if settings.match_conditions {
            let mut all = vec![
                condition("launch-workload", &launch),
                condition("relevant-update", &update),
            ];
            all.extend(conditions);
            all.extend(settings.extra_conditions.iter().cloned());
            h["matchConditions"] = Value::Array(all);
        }
        h
    };
    let labels = json!({
        "app.kubernetes.io/managed-by": "launchgate",
        WEBHOOK_SET_LABEL: settings.name,
    });
    let mut out = Vec::new();
    if let Some(m) = &settings.mutate {
        let mut h = hook(&m.name, "/mutate", &m.failure_policy, Vec::new());
        h["reinvocationPolicy"] = json!(m.reinvocation_policy);
        out.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": settings.name, "labels": labels},
            "webhooks": [h],
        }));
    }
    if let Some(v) = &settings.validate {
        let mut hooks = match (
            v.fail_closed,
            settings.match_conditions,
            deny_queue_condition(policy),
        ) {
            // Without matchConditions nothing can be told apart: one webhook.
            (closed, false, _) => vec![hook(
                &v.name,
                "/validate",
                if closed { "Fail" } else { "Ignore" },
                Vec::new(),
            )],
            (true, true, Some(deny)) => vec![
                hook(
                    &split_name(&v.name, "deny"),
                    "/validate",
                    "Fail",
                    vec![condition("deny-queue", &deny)],
                ),
                hook(
                    &split_name(&v.name, "warn"),
                    "/validate",
                    "Ignore",
                    vec![condition("not-deny-queue", &format!("!({deny})"))],
                ),
            ],
            // Every queue fails open.
            _ => vec![hook(
                &split_name(&v.name, "warn"),
                "/validate",
                "Ignore",
                Vec::new(),
            )],
        };
        let scaled: Vec<WorkloadKind> = WorkloadKind::all()
            .filter(|k| k.spec().scale.is_some())
            .filter(|k| {
                settings.kinds.is_empty()
                    || settings.kinds.iter().any(|r| r == k.spec().webhook_rule)
            })
            .collect();
        if !scaled.is_empty() {
            let base = hook(&v.name, "/validate", "Ignore", Vec::new());
            hooks.push(scale_hook(&base, &v.name, &scaled));
        }
        let vias: Vec<&'static Intermediate> = Intermediate::all()
            .filter(|&via| {
                through(via).any(|(k, _)| {
                    settings.kinds.is_empty()
                        || settings.kinds.iter().any(|r| r == k.spec().webhook_rule)
                })
            })
            .collect();
        if !vias.is_empty() {
            // Closed as the validating webhook is: where a queue denies (a warn-only rollout
            // never blocks a run).
            let closed = v.fail_closed && deny_queue_condition(policy).is_some();
            let failure = if closed { "Fail" } else { "Ignore" };
            let base = hook(&v.name, "/validate", failure, Vec::new());
            hooks.push(intermediate_hook(
                &base,
                &v.name,
                &vias,
                failure,
                settings.match_conditions,
            ));
        }
        if settings.launch_queues {
            let base = hook(&v.name, "/validate", "Ignore", Vec::new());
            hooks.push(launchqueue_hook(&base, &v.name));
        }
        out.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": settings.name, "labels": labels},
            "webhooks": hooks,
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in config plus `other-queue`, a copy of its queue whose every rule only warns
    /// and whose limits' enforcement is `extra`.
    fn policy(extra: &str) -> Policy {
        policy_with(extra, |_| {})
    }

    fn policy_with(extra: &str, edit: impl FnOnce(&mut Value)) -> Policy {
        built_in_with(true, extra, edit)
    }

    /// The built-in config (with its `match.exemptions`, or without), and `other-queue` as
    /// [`policy_with`] makes it.
    fn built_in_with(exemptions: bool, extra: &str, edit: impl FnOnce(&mut Value)) -> Policy {
        let mut config: Value =
            serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).expect("built-in config");
        if !exemptions {
            config["match"]["exemptions"] = json!([]);
        }
        let mut warn = config["queues"]["gpu-queue"].clone();
        warn["limits"]["enforcement"] = json!(extra);
        warn["pytorch"]["onUnwirable"] = json!("warn");
        edit(&mut warn);
        config["queues"]["other-queue"] = warn;
        Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).expect("policy")
    }

    #[test]
    fn only_updates_that_change_what_is_judged_are_sent() {
        let objects = configurations(&policy("warn"), &Settings::default()).unwrap();
        let mut hooks_seen = 0;
        for kind in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            for h in hooks(&objects, kind) {
                let update = &h["matchConditions"][1];
                assert_eq!(update["name"], "relevant-update");
                let expression = update["expression"].as_str().unwrap();
                assert!(
                    expression.starts_with("request.operation != 'UPDATE' || (has(request.subResource) && request.subResource != '') ||")
                        && expression.contains("object.spec != oldObject.spec")
                        && expression.contains("['wandb.ai/monitor', 'wandb.ai/agent', 'launchgate.io/queue', 'queue'].exists(k,")
                        && expression.contains("k.startsWith('kueue.x-k8s.io/')"),
                    "{expression}"
                );
                // Only the operations and subresources that can change what a limit covers.
                for rule in h["rules"].as_array().unwrap() {
                    assert_eq!(rule["operations"], json!(["CREATE", "UPDATE"]));
                }
                hooks_seen += 1;
            }
        }
        assert_eq!(hooks_seen, 3);
        // The chart's launch labels replace the config's.
        let settings = Settings {
            launch_labels: vec!["acme.io/launch".into(), "acme.io/launch".into()],
            ..Settings::default()
        };
        let objects = configurations(&policy("warn"), &settings).unwrap();
        let m = hooks(&objects, "MutatingWebhookConfiguration");
        // ... and the labels that name a queue are still sent when they change.
        assert!(
            m[0]["matchConditions"][1]["expression"]
                .as_str()
                .unwrap()
                .contains("['acme.io/launch', 'launchgate.io/queue', 'queue'].exists(k,")
        );
    }

    #[test]
    fn a_label_that_only_names_a_queue_sends_no_object_to_the_webhooks() {
        use crate::native::eval::{V, eval};
        let policy = Policy::embedded_default();
        let objects = configurations(&policy, &Settings::default()).unwrap();
        let job = |labels: Value, template: Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": "etl", "labels": labels},
                   "spec": {"template": {"metadata": {"labels": template},
                            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
        };
        let sent = |hook: &Value, old: Option<&Value>, object: &Value| -> bool {
            let request = json!({"operation": if old.is_some() { "UPDATE" } else { "CREATE" },
                                 "namespace": "team-b", "subResource": "",
                                 "kind": {"group": "batch", "version": "v1", "kind": "Job"}});
            hook["matchConditions"].as_array().unwrap().iter().all(|c| {
                let vars = [
                    ("object", V::from_json(object)),
                    ("oldObject", old.map_or(V::Null, V::from_json)),
                    ("request", V::from_json(&request)),
                ];
                match eval(c["expression"].as_str().unwrap(), &vars) {
                    Ok(V::Bool(b)) => b,
                    other => panic!("{}: {other:?}", c["name"]),
                }
            })
        };
        let every: Vec<Value> = [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ]
        .iter()
        .flat_map(|k| hooks(&objects, k))
        .collect();
        assert!(every.len() >= 2);
        for hook in &every {
            // Another team's Jobs with common labels (`queue` among them): never sent.
            for (labels, template) in [
                (json!({"queue": "gpu-queue"}), json!({})),
                (json!({"app": "etl", "team": "b"}), json!({"queue": "x"})),
                (
                    json!({"queue": "x", "app": "etl", "team": "b"}),
                    json!({"queue": "x"}),
                ),
            ] {
                let object = job(labels, template);
                assert!(!sent(hook, None, &object), "{}: {object}", hook["name"]);
            }
        }
        // A launch workload is sent to the mutating webhook and to the validating webhook of
        // its queue (the built-in queue fails closed), and so is its UPDATE that relabels its
        // queue.
        let launch = job(json!({"wandb.ai/monitor": "1", "queue": "a"}), json!({}));
        let mut moved = launch.clone();
        moved["metadata"]["labels"]["queue"] = json!("b");
        let marked = job(json!({"launchgate.io/queue": "gpu-queue"}), json!({}));
        for kind in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            let of_kind = hooks(&objects, kind);
            for (old, object) in [(None, &launch), (Some(&launch), &moved), (None, &marked)] {
                assert!(
                    of_kind.iter().any(|h| sent(h, old, object)),
                    "{kind}: {object}"
                );
            }
        }
    }

    /// `policy_with`, without the built-in config's exemption.
    fn unexempted(extra: &str, edit: impl FnOnce(&mut Value)) -> Policy {
        built_in_with(false, extra, edit)
    }

    #[test]
    fn a_queue_with_any_deny_rule_fails_closed() {
        let closed = |p: &Policy| {
            deny_queue_condition(p)
                .unwrap()
                .contains("in ['gpu-queue', 'other-queue']")
        };
        let ids = |p: &Policy| -> Vec<&'static str> {
            p.deny_rules(p.queue("other-queue").unwrap())
                .iter()
                .map(|r| r.id)
                .collect()
        };
        assert!(!closed(&unexempted("warn", |_| {})));
        assert!(ids(&unexempted("warn", |_| {})).is_empty());
        // An exemption configured anywhere: a mark launchgate did not write is denied in every
        // queue (a mark naming the exemption would exempt what inherits it), but that alone
        // does not make a warn queue fail closed.
        assert_eq!(ids(&policy("warn")), ["exemptions.unearnedMark"]);
        assert!(!closed(&policy("warn")));
        assert!(closed(&policy("deny")));
        // A queue's own exemption: that queue only.
        let own = unexempted("warn", |q| {
            q["exemptions"] = json!([{"name": "smoke", "groups": ["smoke-testers"]}]);
        });
        assert_eq!(ids(&own), ["exemptions.unearnedMark"]);
        let gpu = own.queue("gpu-queue").unwrap();
        assert!(
            !own.deny_rules(gpu)
                .contains(&crate::rules::EXEMPTIONS_UNEARNED_MARK)
        );
        for (rules, edit) in [
            (
                &[
                    "limits.allowedNamespaces",
                    "limits.variables",
                    "limits.fields",
                    "limits.strict",
                    "limits.totals",
                    "limits.maxActiveDeadlineSeconds",
                    "limits.allowedRegistries",
                    // The example queue's `gpus` bounds every container's nvidia.com/gpu.
                    "accelerators.uncounted",
                    // No GPU by environment is on by default.
                    "visibleDevices.tenantValue",
                ][..],
                json!({"limits": {"enforcement": "deny"}}),
            ),
            (
                &["pytorch.onUnwirable"][..],
                json!({"pytorch": {"onUnwirable": "deny"}}),
            ),
            (
                &["guardrails.gang"][..],
                json!({"guardrails": {"gang": "deny"}}),
            ),
            (
                &["guardrails.costCeiling"][..],
                json!({"guardrails": {"costCeiling": {"maxGpuHours": 8}},
                    "limits": {"unverifiableRuntime": "warn"}}),
            ),
        ] {
            let p = unexempted("warn", |q| {
                for (section, settings) in edit.as_object().unwrap() {
                    for (k, v) in settings.as_object().unwrap() {
                        q[section][k] = v.clone();
                    }
                }
            });
            assert_eq!(ids(&p), rules);
            assert!(
                closed(&p),
                "{rules:?}: {}",
                deny_queue_condition(&p).unwrap()
            );
        }
        // A bound on a run's size denies a TrainJob whose runtime cannot be read, unless
        // limits.unverifiableRuntime says warn; with the limits denying, a namespaced runtime too.
        let p = unexempted("warn", |q| {
            q["limits"]["totals"] = json!({"nvidia.com/gpu": {"maximum": 16}});
        });
        assert_eq!(ids(&p), ["limits.unverifiableRuntime"]);
        assert!(closed(&p));
        let p = unexempted("deny", |q| {
            q["limits"]["totals"] = json!({"nvidia.com/gpu": {"maximum": 16}});
        });
        assert!(
            ids(&p).contains(&"limits.trainingRuntimes"),
            "{:?}",
            ids(&p)
        );
        let p = unexempted("warn", |q| {
            q["limits"]["totals"] = json!({"nvidia.com/gpu": {"maximum": 16}});
            q["limits"]["unverifiableRuntime"] = json!("warn");
        });
        assert!(!closed(&p));
        // A cost ceiling that only warns (and a runtime it cannot read only warned about), or
        // the wiring off, does not deny.
        let p = unexempted("warn", |q| {
            q["guardrails"]["costCeiling"] = json!({"maxGpuHours": 8, "enforcement": "warn"});
            q["limits"]["unverifiableRuntime"] = json!("warn");
            q["pytorch"] = json!({"enabled": false, "onUnwirable": "deny"});
        });
        assert!(!closed(&p));
    }

    fn all_hooks(objects: &[Value], kind: &str) -> Vec<Value> {
        objects
            .iter()
            .find(|o| o["kind"] == kind)
            .map(|o| o["webhooks"].as_array().cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// The webhooks but the scale subresources' and the intermediate owners' own.
    fn hooks(objects: &[Value], kind: &str) -> Vec<Value> {
        all_hooks(objects, kind)
            .into_iter()
            .filter(|h| {
                let name = h["name"].as_str().unwrap_or_default();
                !name.contains("-scale.") && !name.contains("-intermediates.")
            })
            .collect()
    }

    /// The StatefulSets a LeaderWorkerSet's pods come from have a webhook of their own: sent
    /// only those whose pod template carries the set's name, on CREATE and on an UPDATE of the
    /// spec, failing as the validating webhook does (open without matchConditions, which would
    /// send it every StatefulSet); none when the rules leave LeaderWorkerSets out.
    #[test]
    fn the_statefulsets_of_a_leaderworkerset_have_a_webhook_of_their_own() {
        let of = |settings: &Settings| {
            all_hooks(
                &configurations(&policy("warn"), settings).unwrap(),
                "ValidatingWebhookConfiguration",
            )
            .into_iter()
            .filter(|h| h["name"] == "validate-intermediates.launchgate.io")
            .collect::<Vec<_>>()
        };
        let hooks = of(&Settings::default());
        assert_eq!(hooks.len(), 1);
        let hook = &hooks[0];
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(
            hook["rules"],
            json!([{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["statefulsets"],
                "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}])
        );
        assert_eq!(
            hook["clientConfig"]["url"],
            "https://127.0.0.1:8443/validate"
        );
        let conditions = hook["matchConditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2);
        let carries = conditions[0]["expression"].as_str().unwrap();
        assert!(
            carries.starts_with("request.kind.group == 'apps' && request.kind.kind == 'StatefulSet'")
                && carries.contains("['leaderworkerset.sigs.k8s.io/name'].exists(k, k in object.spec.template.metadata.labels)"),
            "{carries}"
        );
        assert_eq!(conditions[1]["expression"], INTERMEDIATE_SPEC_CHANGED);
        let mut open = Settings::default();
        open.validate.as_mut().unwrap().fail_closed = false;
        assert_eq!(of(&open)[0]["failurePolicy"], "Ignore");
        // Every queue only warns: open, as the validating webhook is.
        let mut config: Value =
            serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).expect("built-in config");
        config["queues"]["gpu-queue"]["limits"]["enforcement"] = json!("audit");
        config["queues"]["gpu-queue"]["pytorch"]["onUnwirable"] = json!("warn");
        config["match"]["exemptions"] = json!([]);
        let warn_only = Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).unwrap();
        let hooks = all_hooks(
            &configurations(&warn_only, &Settings::default()).unwrap(),
            "ValidatingWebhookConfiguration",
        );
        let intermediates = hooks
            .iter()
            .find(|h| h["name"] == "validate-intermediates.launchgate.io")
            .unwrap();
        assert_eq!(intermediates["failurePolicy"], "Ignore");
        let unconditioned = of(&Settings {
            match_conditions: false,
            ..Settings::default()
        });
        assert_eq!(unconditioned[0]["failurePolicy"], "Ignore");
        assert!(unconditioned[0].get("matchConditions").is_none());
        let without = Settings {
            kinds: vec!["jobs".into()],
            ..Settings::default()
        };
        assert!(of(&without).is_empty());
    }

    #[test]
    fn the_scale_subresources_have_a_fail_open_webhook_of_their_own() {
        for (settings, closed) in [
            (Settings::default(), "validate-deny.launchgate.io"),
            (
                Settings {
                    match_conditions: false,
                    ..Settings::default()
                },
                "validate.launchgate.io",
            ),
        ] {
            let objects = configurations(&policy("warn"), &settings).unwrap();
            let validate = all_hooks(&objects, "ValidatingWebhookConfiguration");
            let scale: Vec<&Value> = validate
                .iter()
                .filter(|h| h["rules"].to_string().contains("/scale"))
                .collect();
            assert_eq!(scale.len(), 1, "{validate:?}");
            assert_eq!(scale[0]["name"], "validate-scale.launchgate.io");
            assert_eq!(scale[0]["failurePolicy"], "Ignore");
            assert_eq!(
                scale[0]["rules"],
                json!([{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"],
                    "resources": ["pytorchjobs/scale"], "operations": ["UPDATE"], "scope": "Namespaced"},
                    {"apiGroups": ["leaderworkerset.x-k8s.io"], "apiVersions": ["v1"],
                    "resources": ["leaderworkersets/scale"], "operations": ["UPDATE"], "scope": "Namespaced"}])
            );
            assert!(scale[0].get("matchConditions").is_none());
            assert_eq!(
                scale[0]["clientConfig"]["url"],
                "https://127.0.0.1:8443/validate"
            );
            let closed = validate.iter().find(|h| h["name"] == closed).unwrap();
            assert_eq!(closed["failurePolicy"], "Fail");
            assert!(!closed["rules"].to_string().contains("/scale"));
            assert!(
                !closed["matchConditions"].to_string().contains("scale"),
                "{closed}"
            );
        }
        // Without the PyTorchJob rule, no scale webhook.
        let settings = Settings {
            kinds: vec!["jobs".into()],
            ..Settings::default()
        };
        let objects = configurations(&policy("warn"), &settings).unwrap();
        assert!(
            !all_hooks(&objects, "ValidatingWebhookConfiguration")
                .iter()
                .any(|h| h["rules"].to_string().contains("/scale"))
        );
    }

    #[test]
    fn a_deny_and_a_warn_queue_get_a_closed_and_an_open_webhook() {
        let objects = configurations(&unexempted("warn", |_| {}), &Settings::default()).unwrap();
        let validate = hooks(&objects, "ValidatingWebhookConfiguration");
        let names: Vec<(&str, &str)> = validate
            .iter()
            .map(|h| {
                (
                    h["name"].as_str().unwrap(),
                    h["failurePolicy"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("validate-deny.launchgate.io", "Fail"),
                ("validate-warn.launchgate.io", "Ignore")
            ]
        );
        let deny = validate[0]["matchConditions"][2]["expression"]
            .as_str()
            .unwrap();
        assert!(deny.contains("in ['gpu-queue']"), "{deny}");
        assert!(!deny.contains("other-queue']"), "{deny}");
        let open = validate[1]["matchConditions"][2]["expression"]
            .as_str()
            .unwrap();
        assert_eq!(open, format!("!({deny})"));
        let mutate = hooks(&objects, "MutatingWebhookConfiguration");
        assert_eq!(mutate.len(), 1);
        assert_eq!(mutate[0]["failurePolicy"], "Ignore");
        assert_eq!(mutate[0]["reinvocationPolicy"], "IfNeeded");
        assert_eq!(mutate[0]["matchConditions"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_trainjob_fails_closed_only_when_its_queue_may_come_from_env() {
        let trainjob = "request.kind.group == 'trainer.kubeflow.org'";
        // The built-in config reads the queue from env: a TrainJob without a queue label.
        let deny = deny_queue_condition(&policy("warn")).unwrap();
        assert!(deny.contains(&format!("({trainjob} && [")), "{deny}");
        // Without queue env: TrainJobs are resolved like every kind.
        let mut config: Value =
            serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).expect("built-in config");
        config["match"]["queueEnv"] = Value::Null;
        config["match"]["queueEntityEnv"] = Value::Null;
        let p = Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).unwrap();
        assert!(!deny_queue_condition(&p).unwrap().contains(trainjob));
        // A queue under an entity: the entity env of the TrainJob could pick it.
        config["match"]["queueEntityEnv"] = json!("WANDB_LAUNCH_QUEUE_ENTITY");
        config["queues"]["acme/gpu-queue"] = config["queues"]["gpu-queue"].clone();
        let p = Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).unwrap();
        assert!(
            deny_queue_condition(&p)
                .unwrap()
                .contains(&format!("({trainjob} && true)"))
        );
    }

    #[test]
    fn without_a_deny_queue_every_request_fails_open() {
        let mut config: Value =
            serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).expect("built-in config");
        config["queues"]["gpu-queue"]["limits"]["enforcement"] = json!("audit");
        config["queues"]["gpu-queue"]["pytorch"]["onUnwirable"] = json!("warn");
        config["match"]["exemptions"] = json!([]);
        let policy = Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).unwrap();
        assert!(deny_queue_condition(&policy).is_none());
        let objects = configurations(&policy, &Settings::default()).unwrap();
        let validate = hooks(&objects, "ValidatingWebhookConfiguration");
        assert_eq!(validate.len(), 1);
        assert_eq!(validate[0]["name"], "validate-warn.launchgate.io");
        assert_eq!(validate[0]["failurePolicy"], "Ignore");
    }

    #[test]
    fn fail_open_and_no_match_conditions_give_one_validating_webhook() {
        let p = policy("warn");
        let mut settings = Settings::default();
        settings.validate.as_mut().unwrap().fail_closed = false;
        let validate = hooks(
            &configurations(&p, &settings).unwrap(),
            "ValidatingWebhookConfiguration",
        );
        assert_eq!(validate.len(), 1);
        assert_eq!(validate[0]["failurePolicy"], "Ignore");

        let settings = Settings {
            match_conditions: false,
            ..Settings::default()
        };
        let objects = configurations(&p, &settings).unwrap();
        let validate = hooks(&objects, "ValidatingWebhookConfiguration");
        assert_eq!(validate.len(), 1);
        assert_eq!(validate[0]["name"], "validate.launchgate.io");
        assert_eq!(validate[0]["failurePolicy"], "Fail");
        assert!(validate[0].get("matchConditions").is_none());
    }

    #[test]
    fn the_endpoint_selectors_and_kinds_come_from_the_settings() {
        let settings = Settings {
            name: "lg".into(),
            endpoint: "launchgate/lg:443".parse().unwrap(),
            ca_bundle: "PEM".into(),
            namespace_selector: Some(json!({"matchLabels": {"team": "a"}})),
            object_selector: Some(json!({"matchLabels": {"x": "y"}})),
            timeout_seconds: 7,
            kinds: vec!["jobs".into(), "pytorchjob".into()],
            launch_labels: vec!["acme.io/launch".into()],
            extra_conditions: vec![json!({"name": "extra", "expression": "true"})],
            mutate: None,
            ..Settings::default()
        };
        let objects = configurations(&policy("warn"), &settings).unwrap();
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0]["metadata"]["name"], "lg");
        // Labelled with the installation, which an uninstall deletes by.
        assert_eq!(objects[0]["metadata"]["labels"][WEBHOOK_SET_LABEL], "lg");
        for h in hooks(&objects, "ValidatingWebhookConfiguration") {
            assert_eq!(
                h["clientConfig"],
                json!({
                    "service": {"namespace": "launchgate", "name": "lg", "path": "/validate", "port": 443},
                    "caBundle": "UEVN",
                })
            );
            assert_eq!(h["timeoutSeconds"], 7);
            assert_eq!(h["namespaceSelector"]["matchLabels"]["team"], "a");
            assert_eq!(h["objectSelector"]["matchLabels"]["x"], "y");
            let resources: Vec<&Value> = h["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| &r["resources"])
                .collect();
            assert_eq!(resources, [&json!(["jobs"]), &json!(["pytorchjobs"])]);
            let conditions = h["matchConditions"].as_array().unwrap();
            assert!(
                conditions[0]["expression"]
                    .as_str()
                    .unwrap()
                    .contains("'acme.io/launch'")
            );
            assert_eq!(conditions.last().unwrap()["name"], "extra");
        }
        let bad = Settings {
            kinds: vec!["deployments".into()],
            ..Settings::default()
        };
        assert!(
            configurations(&policy("warn"), &bad)
                .unwrap_err()
                .contains("deployments")
        );
        let url = Settings {
            endpoint: Endpoint::Url("https://127.0.0.1:9443/".into()),
            ..Settings::default()
        };
        let objects = configurations(&policy("warn"), &url).unwrap();
        assert_eq!(
            hooks(&objects, "MutatingWebhookConfiguration")[0]["clientConfig"]["url"],
            "https://127.0.0.1:9443/mutate"
        );
    }

    #[test]
    fn a_service_reference_is_checked() {
        for bad in [
            "lg:443", "ns/lg", "ns/lg:x", "/lg:443", "ns/:443", "ns/lg:0",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }

    #[test]
    fn names_split_after_the_first_label() {
        assert_eq!(
            split_name("validate.launchgate.io", "deny"),
            "validate-deny.launchgate.io"
        );
        assert_eq!(split_name("v", "warn"), "v-warn");
    }
}
