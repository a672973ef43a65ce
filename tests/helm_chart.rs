//! The Helm chart (charts/launchgate) and the plain manifests (manifests/), checked with the real
//! Helm library (helm-sdkpy, Helm v4 in Go) through `scripts/helm_check.py`:
//! lint, render, parse every object into k8s-openapi types, and hold the webhook
//! configurations to the rules that keep a webhook from taking a cluster down.
//!
//! Needs Python 3 and `pip install --ignore-requires-python helm-sdkpy`. Without them the tests
//! that run Helm return at once and the binary says so on one line of stderr, unless
//! `LAUNCHGATE_HELM_REQUIRED=1` (CI), which makes the missing library a failure.

mod common;

use common::{launchgate, options, root, start_with, text};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::admissionregistration::v1beta1;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

const INSTALL_HINT: &str = "pip install --ignore-requires-python helm-sdkpy";
const RELEASE_NS: &str = "launchgate";

/// Helm's library, reached through `python3 scripts/helm_check.py`. Only [`helm`] makes one,
/// so every test that runs Helm has first found out whether it can.
#[derive(Clone, Copy)]
struct Helm(());

/// Helm's library when Python 3 has it, looked for once per test binary. When it is missing,
/// `None` (the test returns) and one `SKIPPED` line on stderr for the whole binary; with
/// `LAUNCHGATE_HELM_REQUIRED` set (other than to `0`), a failure naming the install command.
fn helm() -> Option<Helm> {
    static MISSING: OnceLock<Option<String>> = OnceLock::new();
    let required =
        std::env::var("LAUNCHGATE_HELM_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0");
    let missing = MISSING.get_or_init(|| {
        let missing = helm_missing();
        if let Some(why) = missing.as_deref().filter(|_| !required) {
            // Straight to the process's stderr: the test harness captures `eprintln!`.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: helm chart tests need Python 3 and `{INSTALL_HINT}` ({why}); \
                 LAUNCHGATE_HELM_REQUIRED=1 makes this a failure"
            );
        }
        missing
    });
    match missing {
        None => Some(Helm(())),
        Some(why) if required => panic!(
            "LAUNCHGATE_HELM_REQUIRED is set and Helm's Python library is missing ({why}): \
             run `{INSTALL_HINT}`"
        ),
        Some(_) => None,
    }
}

/// Why `python3` cannot import Helm's library, or `None` when it can.
fn helm_missing() -> Option<String> {
    match Command::new("python3")
        .args(["-c", "import helm_sdkpy"])
        .output()
    {
        Err(e) => Some(format!("no python3: {e}")),
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(
            text(&out.stderr)
                .lines()
                .last()
                .unwrap_or("python3 -c 'import helm_sdkpy' failed")
                .to_string(),
        ),
    }
}

impl Helm {
    /// Runs `python3 scripts/helm_check.py ARGS`: (success, stdout, stderr).
    fn check(self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new("python3")
            .arg(root().join("scripts/helm_check.py"))
            .args(args)
            .current_dir(root())
            .output()
            .expect("python3 runs");
        let stderr = text(&out.stderr);
        assert_ne!(
            out.status.code(),
            Some(3),
            "the Python Helm library is missing: run `{INSTALL_HINT}`\n{stderr}"
        );
        (out.status.success(), text(&out.stdout), stderr)
    }

    /// Renders the chart (like `helm template`) and returns every object as JSON.
    fn render(self, args: &[&str]) -> Vec<Value> {
        let mut full = vec!["render"];
        full.extend_from_slice(args);
        let (ok, stdout, stderr) = self.check(&full);
        assert!(ok, "helm_check.py {full:?} failed:\n{stderr}");
        parse_docs(&stdout)
    }

    /// [`Helm::render`] with `webhook.registration: chart`: the webhook configurations rendered
    /// by Helm (what `manifests/` ships).
    fn render_static(self, args: &[&str]) -> Vec<Value> {
        let mut full = vec!["--set-json", STATIC_REGISTRATION];
        full.extend_from_slice(args);
        self.render(&full)
    }
}

/// Values that make Helm render the webhook configurations.
const STATIC_REGISTRATION: &str = r#"{"webhook":{"registration":"chart"}}"#;

fn parse_docs(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).expect("valid YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

fn of_kind<'a>(objs: &'a [Value], k: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| kind(o) == k).collect()
}

fn one<T: DeserializeOwned>(objs: &[Value], k: &str) -> T {
    let found = of_kind(objs, k);
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {k}, found {}",
        found.len()
    );
    typed(found[0])
}

fn typed<T: DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("{} {}: {e}", kind(v), v["metadata"]["name"]))
}

/// Deletes empty maps/lists and nulls, so a typed round trip can be compared to the source.
fn prune(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(m) => {
            let m: serde_json::Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| prune(v).map(|v| (k.clone(), v)))
                .collect();
            (!m.is_empty()).then_some(Value::Object(m))
        }
        Value::Array(a) => {
            let a: Vec<Value> = a.iter().filter_map(prune).collect();
            (!a.is_empty()).then_some(Value::Array(a))
        }
        other => Some(other.clone()),
    }
}

/// Parses `v` as `T` and checks nothing was lost: a misspelled or misplaced field in a
/// template would be silently dropped by the typed parse, and shows up here.
fn round_trip<T: DeserializeOwned + serde::Serialize>(v: &Value) {
    let t: T = typed(v);
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(
        prune(&back),
        prune(v),
        "{} {} has fields Kubernetes does not know (typo or wrong nesting?)",
        kind(v),
        v["metadata"]["name"]
    );
}

/// `o` as its `admissionregistration.k8s.io/v1beta1` form.
fn as_beta(o: &Value) -> Value {
    let mut beta = o.clone();
    beta["apiVersion"] = "admissionregistration.k8s.io/v1beta1".into();
    beta
}

/// Every object parses into its k8s-openapi type without losing a field; CRD-backed objects
/// (cert-manager, Prometheus Operator) at least carry apiVersion/kind/metadata.name/spec.
fn check_all_objects(objs: &[Value]) {
    assert!(!objs.is_empty());
    for o in objs {
        let api = o["apiVersion"].as_str().unwrap_or_default();
        assert!(
            o["metadata"]["name"].is_string(),
            "object without a name: {o}"
        );
        match (api, kind(o)) {
            ("v1", "ConfigMap") => round_trip::<ConfigMap>(o),
            ("v1", "Secret") => round_trip::<Secret>(o),
            ("v1", "Service") => round_trip::<Service>(o),
            ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(o),
            ("v1", "Namespace") => round_trip::<Namespace>(o),
            ("apps/v1", "Deployment") => round_trip::<Deployment>(o),
            ("policy/v1", "PodDisruptionBudget") => round_trip::<PodDisruptionBudget>(o),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(o),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                round_trip::<ClusterRoleBinding>(o)
            }
            ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(o),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(o),
            ("batch/v1", "Job") => round_trip::<Job>(o),
            ("networking.k8s.io/v1", "NetworkPolicy") => round_trip::<NetworkPolicy>(o),
            ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
                round_trip::<MutatingWebhookConfiguration>(o)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
                round_trip::<ValidatingWebhookConfiguration>(o)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
                round_trip::<ValidatingAdmissionPolicy>(o)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
                round_trip::<ValidatingAdmissionPolicyBinding>(o)
            }
            // v1 in Kubernetes 1.36; k8s-openapi's newest types have the same fields as beta.
            ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy") => {
                round_trip::<v1beta1::MutatingAdmissionPolicy>(&as_beta(o))
            }
            ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding") => {
                round_trip::<v1beta1::MutatingAdmissionPolicyBinding>(&as_beta(o))
            }
            ("cert-manager.io/v1", "Certificate" | "Issuer")
            | ("monitoring.coreos.com/v1", "ServiceMonitor" | "PrometheusRule") => {
                assert!(o["spec"].is_object(), "{api} {} without spec", kind(o))
            }
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                assert_eq!(
                    o,
                    &launchgate::policy::launchqueue::crd(),
                    "the chart's crds/ hold the LaunchQueue CRD as generated"
                )
            }
            other => panic!("unexpected object {other:?} in the chart"),
        }
        if o["metadata"]["namespace"].is_string() {
            assert_eq!(
                o["metadata"]["namespace"],
                RELEASE_NS,
                "{} in another namespace",
                kind(o)
            );
        }
    }
}

/// The common view of one webhook of either kind.
struct Hook {
    name: String,
    side_effects: String,
    versions: Vec<String>,
    timeout: Option<i32>,
    failure_policy: Option<String>,
    reinvocation: Option<String>,
    client: WebhookClientConfig,
    rules: Vec<RuleWithOperations>,
    namespace_selector: Option<LabelSelector>,
    has_match_conditions: bool,
}

/// The [`Hook`]s of the one `$kind` in `objs` (a MutatingWebhookConfiguration or a
/// ValidatingWebhookConfiguration: the same webhook fields, but only the mutating one has a
/// reinvocation policy, read by `$reinvocation`).
macro_rules! hooks_of_kind {
    ($objs:expr, $ty:ty, $kind:literal, |$w:ident| $reinvocation:expr) => {{
        let config: $ty = one($objs, $kind);
        config
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|$w| Hook {
                reinvocation: $reinvocation,
                name: $w.name,
                side_effects: $w.side_effects,
                versions: $w.admission_review_versions,
                timeout: $w.timeout_seconds,
                failure_policy: $w.failure_policy,
                client: $w.client_config,
                rules: $w.rules.unwrap_or_default(),
                namespace_selector: $w.namespace_selector,
                has_match_conditions: $w.match_conditions.is_some_and(|c| !c.is_empty()),
            })
            .collect::<Vec<Hook>>()
    }};
}

fn mutating_hooks(objs: &[Value]) -> Vec<Hook> {
    hooks_of_kind!(
        objs,
        MutatingWebhookConfiguration,
        "MutatingWebhookConfiguration",
        |w| w.reinvocation_policy
    )
}

fn validating_hooks(objs: &[Value]) -> Vec<Hook> {
    hooks_of_kind!(
        objs,
        ValidatingWebhookConfiguration,
        "ValidatingWebhookConfiguration",
        |w| None
    )
}

fn excluded_namespaces(sel: &LabelSelector) -> Vec<String> {
    sel.match_expressions
        .iter()
        .flatten()
        .filter(|e| e.key == "kubernetes.io/metadata.name" && e.operator == "NotIn")
        .flat_map(|e| e.values.clone().unwrap_or_default())
        .collect()
}

/// (group, version, resource) triples the rules cover, with their operations.
fn rule_targets(rules: &[RuleWithOperations]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for r in rules {
        let ops = r.operations.clone().unwrap_or_default();
        assert_eq!(
            ops,
            ["CREATE", "UPDATE"],
            "only CREATE/UPDATE (on DELETE `object` is null)"
        );
        for g in r.api_groups.iter().flatten() {
            for v in r.api_versions.iter().flatten() {
                for res in r.resources.iter().flatten() {
                    // Only the subresources that change what the limits cover.
                    if let Some((_, sub)) = res.split_once('/') {
                        assert!(
                            ["ephemeralcontainers", "resize"].contains(&sub),
                            "a subresource launchgate does not judge: {res}"
                        );
                    }
                    out.push((g.clone(), v.clone(), res.clone()));
                }
            }
        }
    }
    out.sort();
    out
}

fn gvr(g: &str, v: &str, r: &str) -> (String, String, String) {
    (g.into(), v.into(), r.into())
}

/// The rules every webhook configuration must follow, in any values combination.
fn check_hook(h: &Hook, path: &str, service: &str) {
    assert_eq!(
        h.side_effects, "None",
        "{}: sideEffects None, or kubectl --dry-run=server breaks",
        h.name
    );
    assert_eq!(h.versions, ["v1"], "{}: admissionReviewVersions", h.name);
    let t = h.timeout.expect("timeoutSeconds set explicitly");
    assert!(
        (1..=30).contains(&t),
        "{}: timeoutSeconds {t} outside 1..=30",
        h.name
    );
    let svc = h.client.service.as_ref().expect("clientConfig.service");
    assert_eq!(svc.path.as_deref(), Some(path), "{}: path", h.name);
    assert_eq!(svc.name, service);
    assert_eq!(svc.namespace, RELEASE_NS);
    assert_eq!(svc.port, Some(443));
    assert!(h.client.url.is_none());
    let excluded = excluded_namespaces(h.namespace_selector.as_ref().expect("namespaceSelector"));
    for ns in ["kube-system", "kube-node-lease", RELEASE_NS] {
        assert!(
            excluded.iter().any(|e| e == ns),
            "{}: namespace {ns} not excluded: {excluded:?}",
            h.name
        );
    }
    assert!(
        matches!(h.failure_policy.as_deref(), Some("Fail" | "Ignore")),
        "{}: failurePolicy set explicitly",
        h.name
    );
}

fn hooks_of(objs: &[Value]) -> (Hook, Hook) {
    let mut m = mutating_hooks(objs);
    let mut v = validating_hooks(objs);
    // With LaunchQueues served, they have a validating webhook of their own.
    if let Some(at) = v.iter().position(|h| h.name.contains("-launchqueues.")) {
        let launchqueues = v.remove(at);
        check_launchqueue_hook(&launchqueues, &v[0]);
    }
    // With a kind whose pods come through an intermediate owner covered (a LeaderWorkerSet's
    // StatefulSets), the intermediate owners have a validating webhook of their own.
    if let Some(at) = v.iter().position(|h| h.name.contains("-intermediates.")) {
        let intermediates = v.remove(at);
        check_intermediate_hook(&intermediates, &v[0]);
    }
    // With a kind that has a scale subresource covered, its scale has a validating webhook of
    // its own.
    if v.len() == 2 {
        let scale = v.remove(1);
        check_scale_hook(&scale, &v[0]);
    }
    assert_eq!((m.len(), v.len()), (1, 1));
    (m.remove(0), v.remove(0))
}

/// The scale webhook: a label-less Scale, judged against the workload it scales, failing open
/// (matchConditions cannot tell a launch workload's Scale from another team's), sent where the
/// main validating webhook is. Its rules are the `UPDATE`s of the scale subresources of the
/// kinds that have one (`files/kinds.json`), of those the main webhook covers.
fn check_scale_hook(scale: &Hook, validate: &Hook) {
    assert_eq!(scale.name, validate.name.replacen('.', "-scale.", 1));
    assert_eq!(scale.failure_policy.as_deref(), Some("Ignore"));
    assert!(!scale.has_match_conditions);
    let covered: Vec<(String, String)> = validate
        .rules
        .iter()
        .flat_map(|r| {
            let groups = r.api_groups.clone().unwrap_or_default();
            let resources = r.resources.clone().unwrap_or_default();
            groups
                .into_iter()
                .flat_map(move |g| resources.clone().into_iter().map(move |r| (g.clone(), r)))
        })
        .collect();
    let mut expected: Vec<(Vec<String>, Vec<String>, Vec<String>)> = Vec::new();
    for k in common::chart_kinds().as_array().unwrap() {
        let (Some(scale), Some(group)) = (k["scale"].as_str(), k["group"].as_str()) else {
            continue;
        };
        let resource = k["resource"].as_str().unwrap();
        if covered.contains(&(group.to_string(), resource.to_string())) {
            let version = k["version"].as_str().unwrap();
            expected.push((vec![group.into()], vec![version.into()], vec![scale.into()]));
        }
    }
    let rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = scale
        .rules
        .iter()
        .map(|rule| {
            assert_eq!(
                rule.operations.as_deref(),
                Some(&["UPDATE".to_string()][..])
            );
            (
                rule.api_groups.clone().unwrap_or_default(),
                rule.api_versions.clone().unwrap_or_default(),
                rule.resources.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(rules, expected);
    assert_eq!(scale.client, validate.client);
    assert_eq!(scale.namespace_selector, validate.namespace_selector);
    assert_eq!(scale.timeout, validate.timeout);
}

/// The intermediate owners' webhook: CREATE and UPDATE of each intermediate owner of
/// `files/intermediates.json` (a StatefulSet), sent where the main validating webhook is and
/// failing as it does when matchConditions select the StatefulSets that carry a launch kind's
/// mark, open when nothing can select them.
fn check_intermediate_hook(hook: &Hook, validate: &Hook) {
    assert_eq!(hook.name, validate.name.replacen('.', "-intermediates.", 1));
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("charts/launchgate/files/intermediates.json"))
            .unwrap(),
    )
    .unwrap();
    let expected: Vec<(String, String, String)> = file
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            gvr(
                i["group"].as_str().unwrap(),
                i["version"].as_str().unwrap(),
                i["resource"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(rule_targets(&hook.rules), expected);
    let failure = if hook.has_match_conditions {
        validate.failure_policy.as_deref()
    } else {
        Some("Ignore")
    };
    assert_eq!(hook.failure_policy.as_deref(), failure);
    assert_eq!(hook.client, validate.client);
    assert_eq!(hook.namespace_selector, validate.namespace_selector);
    assert_eq!(hook.timeout, validate.timeout);
}

/// The LaunchQueues' webhook: CREATE and UPDATE of launchqueues (cluster-scoped), sent where
/// the main validating webhook is, failing open (an outage never blocks the platform team).
fn check_launchqueue_hook(hook: &Hook, validate: &Hook) {
    assert_eq!(hook.name, validate.name.replacen('.', "-launchqueues.", 1));
    assert_eq!(
        rule_targets(&hook.rules),
        [gvr("launchgate.io", "v1alpha1", "launchqueues")]
    );
    assert_eq!(hook.rules[0].scope.as_deref(), Some("Cluster"));
    assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
    assert!(!hook.has_match_conditions);
    assert_eq!(hook.client, validate.client);
    assert_eq!(hook.timeout, validate.timeout);
}

fn ca_bundle(h: &Hook) -> String {
    String::from_utf8(h.client.ca_bundle.as_ref().expect("caBundle").0.clone()).expect("PEM")
}

/// The pod spec of the Deployment.
fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

/// The launchgate container of the Deployment.
fn webhook_container(d: &Deployment) -> &Container {
    &pod_spec(d).containers[0]
}

fn deployment_env(d: &Deployment) -> Vec<(String, String)> {
    let c = webhook_container(d);
    c.env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn chart_lints_with_default_and_ci_values() {
    let Some(helm) = helm() else { return };
    // Default values, ci/cert-manager-values.yaml (cert-manager mode, CRD rules off) and
    // ci/manifests-values.yaml, each with Helm's Lint action (schema validation included).
    let (ok, _, stderr) = helm.check(&["lint"]);
    assert!(ok, "helm lint failed:\n{stderr}");
    for f in [
        "default values",
        "charts/launchgate/ci/cert-manager-values.yaml",
        "charts/launchgate/ci/manifests-values.yaml",
    ] {
        assert!(
            stderr.contains(&format!("lint ok ({f})")),
            "{f} not linted:\n{stderr}"
        );
    }
}

#[test]
fn default_render_is_a_safe_webhook() {
    let Some(helm) = helm() else { return };
    let objs = helm.render_static(&[]);
    check_all_objects(&objs);
    let (m, v) = hooks_of(&objs);
    check_hook(&m, "/mutate", "launchgate");
    check_hook(&v, "/validate", "launchgate");
    assert_eq!(m.name, "mutate.launchgate.io");
    assert_eq!(v.name, "validate.launchgate.io");
    assert_eq!(m.reinvocation.as_deref(), Some("IfNeeded"));
    assert_eq!(
        (m.failure_policy.as_deref(), v.failure_policy.as_deref()),
        (Some("Ignore"), Some("Fail"))
    );
    assert_eq!((m.timeout, v.timeout), (Some(5), Some(5)));
    assert!(
        m.has_match_conditions && v.has_match_conditions,
        "matchConditions on by default"
    );
    // Every kind of the registry, with the subresources it judges.
    let kinds = common::chart_kinds();
    let expected: Vec<_> = kinds
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|k| {
            let text = |key: &str| k[key].as_str().unwrap().to_string();
            let (group, version) = (text("group"), text("version"));
            k["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |r| gvr(&group, &version, r.as_str().unwrap()))
        })
        .collect();
    assert!(expected.contains(&gvr("kubeflow.org", "v2beta1", "mpijobs")));
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(rule_targets(&m.rules), expected_sorted);
    assert_eq!(rule_targets(&v.rules), expected_sorted);

    // Generated certificates: the Secret's CA is the caBundle of both webhooks.
    let secret: Secret = one(&objs, "Secret");
    assert_eq!(secret.metadata.name.as_deref(), Some("launchgate-tls"));
    let data = secret.data.unwrap();
    let ca = String::from_utf8(data["ca.crt"].0.clone()).unwrap();
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
    assert_eq!(ca_bundle(&m).trim(), ca.trim());
    assert_eq!(ca_bundle(&v).trim(), ca.trim());
    assert!(data.contains_key("tls.crt") && data.contains_key("tls.key"));

    // Deployment: HA, hardened, probes over HTTPS, certs/config mounted as whole directories.
    let d: Deployment = one(&objs, "Deployment");
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let ru = spec
        .strategy
        .as_ref()
        .unwrap()
        .rolling_update
        .as_ref()
        .unwrap();
    assert_eq!(
        serde_json::to_value(&ru.max_unavailable).unwrap(),
        0,
        "never drop below the ready count"
    );
    let pod = spec.template.spec.as_ref().unwrap();
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    assert_eq!(
        pod.automount_service_account_token,
        Some(true),
        "Events are on by default: the token is needed to write them"
    );
    assert!(pod.affinity.as_ref().unwrap().pod_anti_affinity.is_some());
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_string()][..])
    );
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    let res = c.resources.as_ref().unwrap();
    assert!(
        res.requests
            .as_ref()
            .is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory"))
    );
    assert!(
        res.limits
            .as_ref()
            .is_some_and(|r| r.contains_key("memory"))
    );
    for (probe, path) in [
        (&c.liveness_probe, "/healthz"),
        (&c.readiness_probe, "/readyz"),
    ] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(
            (
                get.scheme.as_deref(),
                serde_json::to_value(&get.port).unwrap()
            ),
            (Some("HTTP"), Value::from("admin")),
            "probes use the plain admin port"
        );
    }
    assert!(
        c.ports
            .iter()
            .flatten()
            .any(|p| p.container_port == 8080 && p.name.as_deref() == Some("admin"))
    );
    for m in c.volume_mounts.iter().flatten() {
        assert!(
            m.sub_path.is_none(),
            "subPath mounts never see Secret/ConfigMap updates"
        );
    }
    let env = deployment_env(&d);
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(get("LAUNCHGATE_TLS_CERT"), "/etc/launchgate/tls/tls.crt");
    assert_eq!(get("LAUNCHGATE_TLS_KEY"), "/etc/launchgate/tls/tls.key");
    assert_eq!(
        get("LAUNCHGATE_CONFIG"),
        "/etc/launchgate/config/config.yaml"
    );
    assert_eq!(get("LAUNCHGATE_SHUTDOWN_DELAY"), "5");
    let grace = pod.termination_grace_period_seconds.unwrap();
    assert!(grace > 5 + get("LAUNCHGATE_DRAIN_TIMEOUT").parse::<i64>().unwrap());
    let annotations = d
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .clone()
        .unwrap_or_default();
    assert!(
        annotations["checksum/config"].len() == 64,
        "a config change rolls the pods by default: {annotations:?}"
    );

    let pdb: PodDisruptionBudget = one(&objs, "PodDisruptionBudget");
    assert!(pdb.spec.unwrap().max_unavailable.is_some());
    // The Service routes 443 to the container's https port.
    let svc: Service = one(&objs, "Service");
    let port = &svc.spec.unwrap().ports.unwrap()[0];
    assert_eq!(port.port, 443);
    assert!(
        c.ports
            .iter()
            .flatten()
            .any(|p| p.container_port == 8443 && p.name.as_deref() == Some("https"))
    );
    // RBAC only for what is on: by default Events (create, nothing else), the LaunchQueues
    // (read them, write their status; the status Lease in the release namespace), and the read
    // of the release namespace's emergency bypass annotation
    // (the_chart_honours_the_emergency_bypass).
    let launchqueues: ClusterRole = typed(
        of_kind(&objs, "ClusterRole")
            .into_iter()
            .find(|o| o["metadata"]["name"] == "launchgate-launchqueues")
            .expect("the LaunchQueues' ClusterRole"),
    );
    assert_eq!(
        granted(&launchqueues.rules.unwrap()),
        [
            (
                "launchgate.io".to_string(),
                "launchqueues".to_string(),
                vec!["get".to_string(), "list".into(), "watch".into()]
            ),
            (
                "launchgate.io".to_string(),
                "launchqueues/status".to_string(),
                vec!["get".to_string(), "patch".into(), "update".into()]
            ),
        ]
    );
    let lease: Role = typed(
        of_kind(&objs, "Role")
            .into_iter()
            .find(|o| o["metadata"]["name"] == "launchgate-launchqueues")
            .expect("the LaunchQueues' Lease Role"),
    );
    assert_eq!(
        granted(&lease.rules.unwrap()),
        [(
            "coordination.k8s.io".to_string(),
            "leases".to_string(),
            vec!["get".to_string(), "create".into(), "update".into()]
        )]
    );
    let roles: Vec<ClusterRole> = of_kind(&objs, "ClusterRole")
        .into_iter()
        .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .filter(|o| o["metadata"]["name"] != "launchgate-bypass")
        .filter(|o| o["metadata"]["name"] != "launchgate-launchqueues")
        .map(typed)
        .collect();
    assert_eq!(roles.len(), 1, "only the Events role");
    let rules = roles[0].rules.clone().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].api_groups.as_deref(),
        Some(&["events.k8s.io".to_string()][..])
    );
    assert_eq!(rules[0].verbs, ["create"]);
    assert!(
        of_kind(&objs, "Role")
            .iter()
            .all(|o| o["metadata"]["name"] == "launchgate-launchqueues")
    );
    let env = deployment_env(&d);
    assert!(env.contains(&("LAUNCHGATE_EVENTS".into(), "true".into())));
    assert!(env.contains(&("LAUNCHGATE_ADMIN_LISTEN".into(), "0.0.0.0:8080".into())));
    // The config map carries the values' config.
    let cm: ConfigMap = one(&objs, "ConfigMap");
    let cfg: Value = serde_yaml::from_str(&cm.data.unwrap()["config.yaml"]).unwrap();
    assert_eq!(cfg["defaultQueue"], "gpu-queue");
}

#[test]
fn cert_manager_mode_with_crd_rules_off() {
    let Some(helm) = helm() else { return };
    let objs = helm.render_static(&["-f", "charts/launchgate/ci/cert-manager-values.yaml"]);
    check_all_objects(&objs);
    let (m, v) = hooks_of(&objs);
    check_hook(&m, "/mutate", "launchgate");
    check_hook(&v, "/validate", "launchgate");
    let core = vec![
        gvr("", "v1", "pods"),
        gvr("", "v1", "pods/ephemeralcontainers"),
        gvr("", "v1", "pods/resize"),
        gvr("batch", "v1", "jobs"),
    ];
    assert_eq!(rule_targets(&m.rules), core);
    assert_eq!(rule_targets(&v.rules), core);
    assert!(
        !m.has_match_conditions,
        "matchConditions switched off in this values file"
    );
    // No chart-made Secret and no caBundle: cainjector fills it from the Certificate's CA.
    assert!(of_kind(&objs, "Secret").is_empty());
    assert!(m.client.ca_bundle.is_none() && v.client.ca_bundle.is_none());
    for k in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let o = of_kind(&objs, k)[0];
        assert_eq!(
            o["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "launchgate/launchgate-serving"
        );
    }
    let serving = of_kind(&objs, "Certificate")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "launchgate-serving")
        .expect("serving Certificate");
    assert_eq!(serving["spec"]["secretName"], "launchgate-tls");
    let names: Vec<&str> = serving["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"launchgate.launchgate.svc"));
    // The CA that cainjector injects is long-lived and separate from the rotating leaf.
    assert!(
        of_kind(&objs, "Certificate")
            .iter()
            .any(|c| c["spec"]["isCA"] == true)
    );
    // Options exercised by the file.
    let d: Deployment = one(&objs, "Deployment");
    let pod = pod_spec(&d);
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    assert_eq!(
        pod.automount_service_account_token,
        Some(true),
        "clusterLookups needs the token"
    );
    assert!(
        d.spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()
            .contains_key("checksum/config")
    );
    let role: ClusterRole = of_kind(&objs, "ClusterRole")
        .into_iter()
        .find(|o| o["metadata"]["name"] == "launchgate")
        .map(typed)
        .expect("the owner-watch ClusterRole");
    // Everything the server watches (files/watched.json), read-only.
    let rules = role.rules.unwrap();
    assert_eq!(granted(&rules), watched_resources(|_| true));
    for rule in &rules {
        assert_eq!(rule.verbs, ["get", "list", "watch"], "read-only");
    }
    let sm = of_kind(&objs, "ServiceMonitor");
    assert_eq!(sm.len(), 1);
    assert_eq!(sm[0]["spec"]["endpoints"][0]["scheme"], "https");
    assert_eq!(sm[0]["spec"]["endpoints"][0]["path"], "/metrics");
}

#[test]
fn generated_certificate_is_kept_across_upgrades_and_rotated_near_expiry() {
    let Some(helm) = helm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let old_ca = "-----BEGIN CERTIFICATE-----\nT0xEQ0E=\n-----END CERTIFICATE-----\n";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let existing = |expires: u64| -> PathBuf {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "launchgate-tls", "namespace": RELEASE_NS,
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
                "annotations": {"meta.helm.sh/release-name": "launchgate",
                    "meta.helm.sh/release-namespace": RELEASE_NS,
                    "launchgate.io/cert-expires": expires.to_string()}},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": b64("OLD CERT"), "tls.key": b64("OLD KEY"), "ca.crt": b64(old_ca)}
        });
        let p = dir.path().join(format!("existing-{expires}.json"));
        std::fs::write(&p, secret.to_string()).unwrap();
        p
    };
    // An upgrade finds the Secret (lookup) far from expiry: certificate and CA are kept.
    let far = existing(now + 400 * 86400);
    let objs = helm.render_static(&["--existing", far.to_str().unwrap()]);
    let (m, v) = hooks_of(&objs);
    assert_eq!(ca_bundle(&m).trim(), old_ca.trim());
    assert_eq!(ca_bundle(&v).trim(), old_ca.trim());
    let secret: Secret = one(&objs, "Secret");
    assert_eq!(secret.data.unwrap()["tls.crt"].0, b"OLD CERT");

    // Within renewBeforeDays: a new CA and certificate; the old CA stays in caBundle for this
    // revision so pods still serving the old certificate are trusted until they reload.
    let near = existing(now + 10 * 86400);
    let objs = helm.render_static(&["--existing", near.to_str().unwrap()]);
    let (m, _) = hooks_of(&objs);
    let bundle = ca_bundle(&m);
    let secret: Secret = one(&objs, "Secret");
    let data = secret.data.unwrap();
    assert_ne!(data["tls.crt"].0, b"OLD CERT");
    let new_ca = String::from_utf8(data["ca.crt"].0.clone()).unwrap();
    assert!(bundle.contains(new_ca.trim()), "new CA trusted");
    assert!(
        bundle.contains(old_ca.trim()),
        "old CA still trusted during the rotation"
    );
}

#[test]
fn bad_values_fail_at_install_time() {
    let Some(helm) = helm() else { return };
    for bad in [
        r#"{"webhook":{"timeoutSeconds":31}}"#,
        r#"{"webhook":{"timeoutSeconds":0}}"#,
        r#"{"webhook":{"validate":{"failurePolicy":"Sometimes"}}}"#,
        r#"{"webhook":{"mutate":{"reinvocationPolicy":"Always"}}}"#,
        r#"{"replicaCount":"two"}"#,
        r#"{"certs":{"mode":"selfsigned"}}"#,
        r#"{"replicas":3}"#,
        r#"{"terminationGracePeriodSeconds":10}"#,
        r#"{"certs":{"mode":"external"}}"#,
        r#"{"adminPort":8443}"#,
        r#"{"adminPort":70000}"#,
        r#"{"events":{"enabled":"yes"}}"#,
        r#"{"tracing":{"otlp":{"enabled":"yes"}}}"#,
        r#"{"tracing":{"otlp":{"endpoint":"collector:4318"}}}"#,
        r#"{"tracing":{"otlp":{"sampler":"sometimes"}}}"#,
        r#"{"tracing":{"otlp":{"samplerArg":"1.5"}}}"#,
        r#"{"tracing":{"otlp":{"resourceAttributes":{"team":"a,b"}}}}"#,
        r#"{"tracing":{"otlp":{"exporter":"zipkin"}}}"#,
    ] {
        let (ok, _, stderr) = helm.check(&["render", "--set-json", bad]);
        assert!(!ok, "values {bad} were accepted");
        assert!(stderr.contains("render failed"), "{bad}: {stderr}");
    }
}

#[test]
fn timeouts_and_failure_policies_are_configurable() {
    let Some(helm) = helm() else { return };
    let objs = helm.render_static(&[
        "--set-json",
        r#"{"webhook":{"timeoutSeconds":3,"mutate":{"failurePolicy":"Fail"},"validate":{"failurePolicy":"Ignore"},"excludeNamespaces":["kube-system","kube-node-lease","monitoring"]}}"#,
    ]);
    let (m, v) = hooks_of(&objs);
    check_hook(&m, "/mutate", "launchgate");
    check_hook(&v, "/validate", "launchgate");
    assert_eq!((m.timeout, v.timeout), (Some(3), Some(3)));
    // The server answers before the API server gives up on it.
    let d: Deployment = one(&objs, "Deployment");
    let deadline = deployment_env(&d)
        .into_iter()
        .find(|(n, _)| n == "LAUNCHGATE_REQUEST_DEADLINE_MS")
        .map(|(_, v)| v.parse::<i64>().unwrap())
        .expect("request deadline set");
    assert_eq!(deadline, 2000, "1 s below timeoutSeconds 3");
    assert_eq!(
        (m.failure_policy.as_deref(), v.failure_policy.as_deref()),
        (Some("Fail"), Some("Ignore"))
    );
    assert!(
        excluded_namespaces(m.namespace_selector.as_ref().unwrap())
            .contains(&"monitoring".to_string())
    );
    // Another release namespace is excluded too (the webhook's own pods must always schedule).
    let objs = helm.render_static(&["--namespace", "platform", "--release", "gate"]);
    let m: MutatingWebhookConfiguration = one(&objs, "MutatingWebhookConfiguration");
    let w = &m.webhooks.unwrap()[0];
    assert!(
        excluded_namespaces(w.namespace_selector.as_ref().unwrap())
            .contains(&"platform".to_string())
    );
    assert_eq!(
        w.client_config.service.as_ref().unwrap().name,
        "gate-launchgate"
    );
}

/// `policyMode`: `webhook` renders no native-policy rights; `hybrid` keeps both webhooks with
/// failure policy Ignore, gives the pods the set to keep (and the webhooks' namespaces for its
/// bindings) and the rights for it, and uninstalling deletes it; `native` registers no webhook.
#[test]
fn policy_modes_render_what_each_needs() {
    let Some(helm) = helm() else { return };
    let native_rights = |objs: &[Value]| {
        of_kind(objs, "ClusterRole").iter().any(|r| {
            r["rules"].as_array().into_iter().flatten().any(|rule| {
                rule["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == "mutatingadmissionpolicies"))
                    && rule["verbs"]
                        .as_array()
                        .is_some_and(|v| v.iter().any(|x| x == "update"))
            })
        })
    };
    let objs = helm.render(&[]);
    assert!(!native_rights(&objs));
    let objs = helm.render_static(&["--set-json", r#"{"policyMode":"hybrid"}"#]);
    let (m, v) = hooks_of(&objs);
    assert_eq!(
        (m.failure_policy.as_deref(), v.failure_policy.as_deref()),
        (Some("Ignore"), Some("Ignore"))
    );
    assert!(native_rights(&objs));
    let d: Deployment = one(&objs, "Deployment");
    let env = deployment_env(&d);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(
        get("LAUNCHGATE_NATIVE_POLICIES").as_deref(),
        Some("launchgate")
    );
    let selector: Value =
        serde_json::from_str(&get("LAUNCHGATE_NATIVE_NAMESPACE_SELECTOR").unwrap()).unwrap();
    let sel: LabelSelector = serde_json::from_value(selector).unwrap();
    assert_eq!(
        excluded_namespaces(&sel),
        excluded_namespaces(m.namespace_selector.as_ref().unwrap())
    );
    let hook_job = of_kind(&objs, "Job")
        .into_iter()
        .find(|j| j["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete")
        .expect("the uninstall hook");
    let args = hook_job["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--native-policies=launchgate"), "{args}");
    let objs = helm.render(&["--set-json", r#"{"policyMode":"native"}"#]);
    assert!(of_kind(&objs, "MutatingWebhookConfiguration").is_empty());
    assert!(of_kind(&objs, "ValidatingWebhookConfiguration").is_empty());
    assert!(native_rights(&objs));
    let (ok, _, err) = helm.check(&["render", "--set-json", r#"{"policyMode":"webhooks"}"#]);
    assert!(
        !ok && err.contains("policyMode"),
        "an unknown mode must fail: {err}"
    );
}

/// Every rule of the Roles and ClusterRoles bound to the ServiceAccount `sa` of the release's
/// namespace in a render.
fn rules_bound_to(objs: &[Value], sa: &str) -> Vec<Value> {
    let bound = |b: &&&Value| {
        b["subjects"].as_array().into_iter().flatten().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == RELEASE_NS
        })
    };
    let mut rules = Vec::new();
    for (binding_kind, role_kind) in [
        ("ClusterRoleBinding", "ClusterRole"),
        ("RoleBinding", "Role"),
    ] {
        for binding in of_kind(objs, binding_kind).iter().filter(bound) {
            assert_eq!(binding["roleRef"]["kind"], role_kind);
            let role = of_kind(objs, role_kind)
                .into_iter()
                .find(|r| r["metadata"]["name"] == binding["roleRef"]["name"])
                .expect("the bound role is in the chart");
            rules.extend(role["rules"].as_array().cloned().unwrap_or_default());
        }
    }
    rules
}

/// What `rules` grant, as (API group, resource, verbs), sorted.
fn granted(rules: &[k8s_openapi::api::rbac::v1::PolicyRule]) -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    for rule in rules {
        for g in rule.api_groups.iter().flatten() {
            for r in rule.resources.iter().flatten() {
                out.push((g.clone(), r.clone(), rule.verbs.clone()));
            }
        }
    }
    out.sort();
    out
}

/// What the server watches (`launchgate::server::owner_cache::watched`) of the entries `pick`
/// takes, as the RBAC that lets it: (API group, resource, `get`/`list`/`watch`), sorted.
fn watched_resources(
    pick: impl Fn(&launchgate::server::owner_cache::WatchedResources) -> bool,
) -> Vec<(String, String, Vec<String>)> {
    let verbs = || ["get", "list", "watch"].map(String::from).to_vec();
    let mut out: Vec<_> = launchgate::server::owner_cache::watched()
        .into_iter()
        .filter(|w| pick(w))
        .flat_map(|w| {
            let group = w.group.clone();
            w.resources
                .into_iter()
                .map(move |r| (group.clone(), r, verbs()))
        })
        .collect();
    out.sort();
    out
}

/// (API group, version, resource, operations) of every rule of `hooks` (webhooks as JSON),
/// sorted.
fn hook_rules(hooks: &[Value]) -> Vec<(String, String, String, Vec<String>)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut out = Vec::new();
    for hook in hooks {
        for rule in hook["rules"].as_array().into_iter().flatten() {
            let operations: Vec<String> = rule["operations"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            for g in rule["apiGroups"].as_array().into_iter().flatten() {
                for v in rule["apiVersions"].as_array().into_iter().flatten() {
                    for r in rule["resources"].as_array().into_iter().flatten() {
                        out.push((text(g), text(v), text(r), operations.clone()));
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every kind of the registry is covered alike by the chart and by the server: with every
/// kind's switch on, and with each kind's switch off (half of them at a time), the rules Helm renders in the
/// webhooks (the scale webhook's included) are the rules a pod of the same release registers,
/// each kind's resources and judged subresources are in the main webhooks exactly when its
/// switch is on, its scale subresource in the scale webhook exactly when it has one and its
/// switch is on; and with `clusterLookups` the chart's RBAC grants `get`, `list`, `watch` on
/// exactly what the server watches, so every kind it watches is readable and no other is.
#[test]
fn the_charts_webhooks_and_rbac_agree_with_the_server_for_every_registered_kind() {
    let Some(helm) = helm() else { return };
    let hooks = |objs: &[Value], kind: &str| -> (Vec<Value>, Vec<Value>) {
        objs.iter()
            .filter(|o| o["kind"] == kind)
            .flat_map(|o| o["webhooks"].as_array().cloned().unwrap_or_default())
            .partition(|h| h["name"].as_str().unwrap_or_default().contains("-scale."))
    };
    let kinds: Vec<_> = launchgate::native::webhooks::rule_names().collect();
    // Every switch on; then every other kind's off, then the others': each kind is off once.
    let cases: [Vec<&str>; 3] = [
        Vec::new(),
        kinds.iter().step_by(2).map(|(rule, _)| *rule).collect(),
        kinds
            .iter()
            .skip(1)
            .step_by(2)
            .map(|(rule, _)| *rule)
            .collect(),
    ];
    for off in &cases {
        let switches: serde_json::Map<String, Value> = off
            .iter()
            .map(|rule| (rule.to_string(), Value::Bool(false)))
            .collect();
        let values =
            serde_json::json!({"clusterLookups": true, "webhook": {"rules": switches}}).to_string();
        let statically = helm.render_static(&["--set-json", &values]);
        let server = server_registered(&helm.render(&["--set-json", &values]));
        let mut chart_main = Vec::new();
        let mut server_main = Vec::new();
        let mut chart_scale = Vec::new();
        let mut server_scale = Vec::new();
        for config in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            let (scale, main) = hooks(&statically, config);
            chart_main.extend(main);
            chart_scale.extend(scale);
            let (scale, main) = hooks(&server, config);
            server_main.extend(main);
            server_scale.extend(scale);
        }
        let chart_main = hook_rules(&chart_main);
        let chart_scale = hook_rules(&chart_scale);
        assert_eq!(chart_main, hook_rules(&server_main), "{values}");
        assert_eq!(chart_scale, hook_rules(&server_scale), "{values}");
        for (rule, kind) in &kinds {
            let (group, version, resource) = kind.api_resource();
            let on = !off.contains(rule);
            let spec = kind.spec();
            let judged: Vec<String> = std::iter::once(resource.to_string())
                .chain(spec.subresources.iter().map(|s| format!("{resource}/{s}")))
                .collect();
            for r in &judged {
                let want = (
                    group.to_string(),
                    version.to_string(),
                    r.clone(),
                    vec!["CREATE".to_string(), "UPDATE".to_string()],
                );
                assert_eq!(chart_main.contains(&want), on, "{rule}: {r} ({values})");
            }
            let scale = (
                group.to_string(),
                version.to_string(),
                format!("{resource}/scale"),
                vec!["UPDATE".to_string()],
            );
            assert_eq!(
                chart_scale.contains(&scale),
                on && spec.scale.is_some(),
                "{rule}: its scale subresource ({values})"
            );
        }
        // What the server watches, every kind it watches among it, and nothing else.
        let role: ClusterRole = of_kind(&statically, "ClusterRole")
            .into_iter()
            .find(|o| o["metadata"]["name"] == "launchgate")
            .map(typed)
            .expect("the ClusterRole of what the server watches");
        let granted = granted(&role.rules.unwrap());
        assert_eq!(granted, watched_resources(|_| true));
        for (rule, kind) in &kinds {
            let (group, _, resource) = kind.api_resource();
            // The descriptor's `watch`: `No`, or how its objects are watched.
            let watched = format!("{:?}", kind.spec().watch) != "No";
            assert_eq!(
                granted.iter().any(|(g, r, _)| g == group && r == resource),
                watched,
                "{rule}: read by the chart's RBAC exactly when its descriptor asks for a watch"
            );
        }
    }
}

/// The four admission policy resources.
const ADMISSION_POLICIES: [&str; 4] = [
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
];

/// The pods' service account may read (`get`) and replace (`update`) its own set's slot
/// objects and nothing else of the four admission policy kinds: no `create` (it could make an
/// admission policy that mutates other namespaces' pods), no `delete`, no `list`, no `patch`.
#[test]
fn native_policy_rights_are_limited_to_the_releases_own_names() {
    let Some(helm) = helm() else { return };
    for (values, slots) in [
        (r#"{"policyMode":"native"}"#, 16),
        (r#"{"policyMode":"hybrid","nativePolicySlots":3}"#, 3),
        (
            r#"{"policyMode":"hybrid","nativePolicySlots":3,"clusterLookups":true}"#,
            3,
        ),
    ] {
        let objs = helm.render(&["--set-json", values]);
        let rules = rules_bound_to(&objs, "launchgate");
        // Which names each verb is granted on, per resource (None: every name).
        for resource in ADMISSION_POLICIES {
            for verb in [
                "get",
                "list",
                "create",
                "update",
                "patch",
                "delete",
                "watch",
                "deletecollection",
            ] {
                let grants: Vec<Option<Vec<String>>> = rules
                    .iter()
                    .filter(|r| {
                        r["apiGroups"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|g| g == "admissionregistration.k8s.io" || g == "*")
                            && r["resources"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|x| x == resource || x == "*")
                            && r["verbs"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|x| x == verb || x == "*")
                    })
                    .map(|r| {
                        r["resourceNames"].as_array().map(|names| {
                            names
                                .iter()
                                .map(|n| n.as_str().unwrap().to_string())
                                .collect()
                        })
                    })
                    .collect();
                match verb {
                    "get" | "update" => {
                        assert_eq!(grants.len(), 1, "{resource} {verb}: {grants:?}");
                        let names = grants[0].clone().expect("limited by resourceNames");
                        assert_eq!(
                            names,
                            launchgate::native::slot_names("launchgate", slots),
                            "{resource} {verb}"
                        );
                    }
                    _ => assert!(grants.is_empty(), "{resource} {verb}: {grants:?}"),
                }
            }
        }
        // Events about the pods' own state: in the release's namespace.
        let native_status = of_kind(&objs, "Role")
            .into_iter()
            .find(|r| r["metadata"]["name"] == "launchgate-native-status")
            .expect("the native status Role");
        assert_eq!(native_status["metadata"]["namespace"], RELEASE_NS);
        assert_eq!(
            native_status["rules"],
            serde_json::json!([{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}])
        );
        let d: Deployment = one(&objs, "Deployment");
        let env = deployment_env(&d);
        assert!(
            env.contains(&(
                "LAUNCHGATE_NATIVE_POLICY_SLOTS".to_string(),
                slots.to_string()
            )),
            "{env:?}"
        );
        let from_field = |name: &str| {
            webhook_container(&d)
                .env
                .as_ref()
                .unwrap()
                .iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value_from.as_ref())
                .and_then(|f| f.field_ref.as_ref())
                .map(|f| f.field_path.clone())
        };
        assert_eq!(
            from_field("LAUNCHGATE_POD_NAMESPACE").as_deref(),
            Some("metadata.namespace")
        );
        assert_eq!(
            from_field("LAUNCHGATE_POD_UID").as_deref(),
            Some("metadata.uid")
        );
    }
    // More queues than slots fails the install, naming the value.
    let (ok, _, err) = helm.check(&[
        "render",
        "--set-json",
        r#"{"policyMode":"native","nativePolicySlots":1,"config":{"queues":{"a":{},"b":{}}}}"#,
    ]);
    assert!(!ok && err.contains("nativePolicySlots"), "{err}");
    // Webhook mode: no rights on admission policies at all, and no slot objects.
    let objs = helm.render(&[]);
    assert!(of_kind(&objs, "ClusterRole").iter().all(|r| {
        r["rules"].as_array().into_iter().flatten().all(|rule| {
            rule["resources"].as_array().is_none_or(|rs| {
                !rs.iter()
                    .any(|x| ADMISSION_POLICIES.contains(&x.as_str().unwrap_or("")))
            })
        })
    }));
    assert!(of_kind(&objs, "ValidatingAdmissionPolicy").is_empty());
    assert!(of_kind(&objs, "MutatingAdmissionPolicy").is_empty());
}

/// native/hybrid: the chart creates every slot's four objects in the server's dormant form
/// (so the pods need no `create`), and an upgrade renders an existing one with its live spec
/// (`lookup`): `helm upgrade` never makes the policies the pods wrote dormant again. An object
/// of the set that is not the release's (created by an earlier version's pods) is not rendered,
/// so Helm does not refuse the upgrade for want of adopting it.
#[test]
fn native_slots_are_created_dormant_and_kept_across_upgrades() {
    let Some(helm) = helm() else { return };
    let values = r#"{"policyMode":"hybrid","nativePolicySlots":3}"#;
    let objs = helm.render(&["--set-json", values]);
    check_all_objects(&objs);
    let slot_objects = |objs: &[Value]| -> Vec<Value> {
        objs.iter()
            .filter(|o| launchgate::native::SlotKind::of(kind(o)).is_some())
            .cloned()
            .collect()
    };
    let rendered = slot_objects(&objs);
    let expected = launchgate::native::slot_objects("launchgate", 3);
    assert_eq!(rendered.len(), expected.len());
    for (slot, slot_kind, name) in &expected {
        let object = rendered
            .iter()
            .find(|o| kind(o) == slot_kind.kind && o["metadata"]["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{} {name} is not in the chart", slot_kind.kind));
        let dormant = launchgate::native::dormant("launchgate", *slot, *slot_kind, name);
        assert_eq!(object["spec"], dormant["spec"], "{name}");
        for label in [
            launchgate::native::POLICY_SET_LABEL,
            launchgate::native::POLICY_SLOT_LABEL,
        ] {
            assert_eq!(
                object["metadata"]["labels"][label], dormant["metadata"]["labels"][label],
                "{name} {label}"
            );
        }
    }

    // An upgrade: slot 0's policy holds a queue's compiled policy (written by the pods into the
    // object Helm created); slot 1's was created by an earlier version's pods, not Helm.
    let policy = launchgate::Policy::embedded_default();
    let set =
        launchgate::native::slot_set(&policy, "launchgate", 3, None, None, &Default::default())
            .unwrap();
    let key = (
        "ValidatingAdmissionPolicy".to_string(),
        "launchgate-q0-limits".to_string(),
    );
    let mut written = set[&key].clone();
    // Helm's marks on what it created, which the pods keep.
    written["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm".into();
    written["metadata"]["annotations"]["meta.helm.sh/release-name"] = "launchgate".into();
    written["metadata"]["annotations"]["meta.helm.sh/release-namespace"] = RELEASE_NS.into();
    let mut earlier = launchgate::native::dormant(
        "launchgate",
        1,
        launchgate::native::SlotKind::of("MutatingAdmissionPolicy").unwrap(),
        "launchgate-q1-mutate",
    );
    earlier["metadata"]["annotations"] =
        serde_json::json!({"launchgate.io/queue-key": "gpu-queue"});
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("existing.json");
    std::fs::write(
        &existing,
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [written, earlier]})
            .to_string(),
    )
    .unwrap();
    let objs = helm.render(&[
        "--set-json",
        values,
        "--existing",
        existing.to_str().unwrap(),
    ]);
    let rendered = slot_objects(&objs);
    let find = |k: &str, n: &str| {
        rendered
            .iter()
            .find(|o| kind(o) == k && o["metadata"]["name"] == n)
            .cloned()
    };
    let kept = find("ValidatingAdmissionPolicy", "launchgate-q0-limits").unwrap();
    assert_eq!(kept["spec"], set[&key]["spec"]);
    assert!(find("MutatingAdmissionPolicy", "launchgate-q1-mutate").is_none());
    assert_eq!(rendered.len(), expected.len() - 1);
    // The rest still dormant.
    let other = find("MutatingAdmissionPolicy", "launchgate-q0-mutate").unwrap();
    assert_eq!(other["spec"]["matchConditions"][0]["expression"], "false");
}

/// The `webhook.*` values as `launchgate serve` flags (what the pod reads from its env).
fn registration_flags(d: &Deployment) -> Vec<String> {
    deployment_env(d)
        .into_iter()
        .filter(|(n, _)| {
            n.starts_with("LAUNCHGATE_WEBHOOK_") || n == "LAUNCHGATE_REGISTER_WEBHOOKS"
        })
        .map(|(n, v)| {
            let flag = n["LAUNCHGATE_".len()..].to_lowercase().replace('_', "-");
            format!("--{flag}={v}")
        })
        .collect()
}

/// The webhook configurations a pod of this render would register.
fn server_registered(objs: &[Value]) -> Vec<Value> {
    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        options: launchgate::server::ServeOptions,
    }
    let d: Deployment = one(objs, "Deployment");
    let mut flags = registration_flags(&d);
    // Whether the server reads LaunchQueues (it registers their webhook then).
    flags.extend(
        deployment_env(&d)
            .into_iter()
            .filter(|(n, _)| n == "LAUNCHGATE_LAUNCHQUEUES")
            .map(|(_, v)| format!("--launchqueues={v}")),
    );
    let opts = <Serve as clap::Parser>::try_parse_from(
        std::iter::once("serve".to_string()).chain(flags.iter().cloned()),
    )
    .unwrap_or_else(|e| panic!("the chart's env is not valid for serve ({flags:?}): {e}"))
    .options;
    let cm: ConfigMap = one(objs, "ConfigMap");
    let policy = launchgate::policy::Policy::from_yaml(&cm.data.unwrap()["config.yaml"]).unwrap();
    let name = opts.registration.register_webhooks.clone().expect("a name");
    let mut settings = opts
        .registration
        .settings(&name, opts.listen, "CA PEM".into());
    // As the server says it: it reads LaunchQueues.
    settings.launch_queues = opts.launch_queues;
    launchgate::native::webhooks::configurations(&policy, &settings).unwrap()
}

/// The parts of a webhook both registration paths must agree on.
fn comparable(hook: &Value) -> Value {
    let mut h = hook.clone();
    let map = h.as_object_mut().unwrap();
    for k in ["name", "failurePolicy", "matchConditions"] {
        map.remove(k);
    }
    map["clientConfig"]
        .as_object_mut()
        .unwrap()
        .remove("caBundle");
    h
}

/// `webhook.registration: server` (the default): Helm renders no webhook configuration, the
/// pods get the rights to apply this release's two (by name only) and the env from which the
/// server builds the webhooks Helm would render — rules, selectors, timeouts, Service, names —
/// with the validating webhook split per queue; hybrid makes both fail open, native registers
/// none, and the uninstall hook still deletes them.
#[test]
fn server_registration_is_the_default_and_builds_the_charts_webhooks() {
    let Some(helm) = helm() else { return };
    let objs = helm.render(&[]);
    assert!(of_kind(&objs, "MutatingWebhookConfiguration").is_empty());
    assert!(of_kind(&objs, "ValidatingWebhookConfiguration").is_empty());
    let role: ClusterRole = typed(
        of_kind(&objs, "ClusterRole")
            .into_iter()
            .find(|r| r["metadata"]["name"] == "launchgate-webhooks")
            .expect("the registration ClusterRole"),
    );
    let rules = role.rules.unwrap();
    let mut resources: Vec<String> = Vec::new();
    for r in &rules {
        assert_eq!(r.verbs, ["get", "create", "patch"]);
        assert_eq!(
            r.resource_names.as_deref(),
            Some(&["launchgate".to_string()][..])
        );
        assert_eq!(
            r.api_groups.as_deref(),
            Some(&["admissionregistration.k8s.io".to_string()][..])
        );
        resources.extend(r.resources.clone().unwrap());
    }
    assert_eq!(
        resources,
        [
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations"
        ]
    );
    let binding: ClusterRoleBinding = typed(
        of_kind(&objs, "ClusterRoleBinding")
            .into_iter()
            .find(|r| r["metadata"]["name"] == "launchgate-webhooks")
            .expect("the registration ClusterRoleBinding"),
    );
    assert_eq!(binding.subjects.unwrap()[0].name, "launchgate");
    let d: Deployment = one(&objs, "Deployment");
    assert_eq!(
        pod_spec(&d).automount_service_account_token,
        Some(true),
        "the pods need a token to register"
    );
    let hook_job = of_kind(&objs, "Job")
        .into_iter()
        .find(|j| j["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete")
        .expect("the uninstall hook");
    let args = hook_job["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--mutating=launchgate") && args.contains("--validating=launchgate"),
        "{args}"
    );

    // The server's webhooks are the chart's, but for the split validating webhook.
    let server = server_registered(&objs);
    let statically = helm.render_static(&[]);
    let hooks = |objs: &[Value], kind: &str| -> Vec<Value> {
        objs.iter()
            .filter(|o| o["kind"] == kind)
            .flat_map(|o| o["webhooks"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let (sm, cm) = (
        hooks(&server, "MutatingWebhookConfiguration"),
        hooks(&statically, "MutatingWebhookConfiguration"),
    );
    assert_eq!(sm.len(), 1);
    assert_eq!(comparable(&sm[0]), comparable(&cm[0]));
    assert_eq!(sm[0]["name"], cm[0]["name"]);
    assert_eq!(sm[0]["failurePolicy"], "Ignore");
    let (sv, cv) = (
        hooks(&server, "ValidatingWebhookConfiguration"),
        hooks(&statically, "ValidatingWebhookConfiguration"),
    );
    let split: Vec<(&str, &str)> = sv
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap(),
                h["failurePolicy"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        split,
        [
            ("validate-deny.launchgate.io", "Fail"),
            ("validate-warn.launchgate.io", "Ignore"),
            ("validate-scale.launchgate.io", "Ignore"),
            ("validate-intermediates.launchgate.io", "Fail"),
            ("validate-launchqueues.launchgate.io", "Ignore")
        ]
    );
    let (launchqueues, sv) = sv.split_last().unwrap();
    // The LaunchQueues' webhook is the chart's too.
    assert_eq!(comparable(launchqueues), comparable(&cv[3]));
    assert_eq!(launchqueues["name"], cv[3]["name"]);
    let (intermediates, sv) = sv.split_last().unwrap();
    let (scale, sv) = sv.split_last().unwrap();
    for h in sv {
        assert_eq!(comparable(h), comparable(&cv[0]));
        assert_eq!(h["matchConditions"][0]["name"], "launch-workload");
    }
    // pytorchjobs/scale's own webhook is the chart's too.
    assert_eq!(comparable(scale), comparable(&cv[1]));
    assert_eq!(scale["name"], cv[1]["name"]);
    assert_eq!(cv[1]["failurePolicy"], "Ignore");
    // And the StatefulSets' (a LeaderWorkerSet's pods come from them), with its conditions.
    assert_eq!(comparable(intermediates), comparable(&cv[2]));
    assert_eq!(intermediates["name"], cv[2]["name"]);
    assert_eq!(intermediates["failurePolicy"], cv[2]["failurePolicy"]);
    assert_eq!(intermediates["matchConditions"], cv[2]["matchConditions"]);
    // Which UPDATEs are sent: one condition, written alike by the chart and the server (the
    // scale webhook takes every scale UPDATE).
    for h in sv.iter().chain(&sm).chain(&cv[..1]).chain(&cm) {
        assert_eq!(
            h["matchConditions"][1], sm[0]["matchConditions"][1],
            "{}",
            h["name"]
        );
    }
    assert_eq!(sm[0]["matchConditions"][1]["name"], "relevant-update");
    for o in &server {
        assert_eq!(o["metadata"]["name"], "launchgate");
    }

    // Values reach the server: timeouts, Service of another release, fail-open validation.
    let objs = helm.render(&[
        "--namespace",
        "platform",
        "--release",
        "gate",
        "--set-json",
        r#"{"webhook":{"timeoutSeconds":3,"validate":{"failurePolicy":"Ignore"},"rules":{"volcano":false},"matchConditions":{"extra":[{"name":"team","expression":"true"}]}}}"#,
    ]);
    let server = server_registered(&objs);
    let v = hooks(&server, "ValidatingWebhookConfiguration");
    assert_eq!(v.len(), 4);
    assert_eq!(v[1]["name"], "validate-scale.launchgate.io");
    assert_eq!(v[2]["name"], "validate-intermediates.launchgate.io");
    assert_eq!(v[3]["name"], "validate-launchqueues.launchgate.io");
    assert_eq!(v[0]["failurePolicy"], "Ignore");
    assert_eq!(v[2]["failurePolicy"], "Ignore");
    assert_eq!(v[0]["timeoutSeconds"], 3);
    assert_eq!(
        v[0]["clientConfig"]["service"],
        serde_json::json!({"namespace": "platform", "name": "gate-launchgate", "path": "/validate", "port": 443})
    );
    assert!(!v[0]["rules"].to_string().contains("batch.volcano.sh"));
    assert_eq!(
        v[0]["matchConditions"].as_array().unwrap().last().unwrap()["name"],
        "team"
    );

    // external certificates: the CA bundle from certs.external.caBundle.
    let ca = launchgate::certs::generate(&["launchgate".to_string()], 1)
        .unwrap()
        .ca_pem;
    let b64 = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(ca)
    };
    let external = serde_json::json!({"certs": {"mode": "external", "secretName": "tls", "external": {"caBundle": b64}}});
    let objs = helm.render(&["--set-json", &external.to_string()]);
    let d: Deployment = one(&objs, "Deployment");
    let flags = registration_flags(&d);
    assert!(
        flags.contains(&format!("--webhook-ca-bundle-base64={b64}")),
        "{flags:?}"
    );
    assert!(!flags.iter().any(|f| f.starts_with("--webhook-ca-bundle=")));
    assert_eq!(server_registered(&objs).len(), 2);

    // hybrid: both fail open; native: nothing registered, no rights for it.
    let objs = helm.render(&["--set-json", r#"{"policyMode":"hybrid"}"#]);
    let server = server_registered(&objs);
    for h in hooks(&server, "MutatingWebhookConfiguration")
        .iter()
        .chain(&hooks(&server, "ValidatingWebhookConfiguration"))
    {
        assert_eq!(h["failurePolicy"], "Ignore", "{}", h["name"]);
    }
    let objs = helm.render(&["--set-json", r#"{"policyMode":"native"}"#]);
    let d: Deployment = one(&objs, "Deployment");
    assert!(registration_flags(&d).is_empty());
    assert!(
        of_kind(&objs, "ClusterRole")
            .iter()
            .all(|r| r["metadata"]["name"] != "launchgate-webhooks")
    );
}

/// manifests/*.yaml: valid Kubernetes objects, and launchgate.yaml is exactly the chart
/// rendered with ci/manifests-values.yaml (so the two cannot drift apart).
#[test]
fn manifests_parse_and_agree_with_the_chart() {
    let Some(helm) = helm() else { return };
    let dir = root().join("manifests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(files.iter().any(|f| f.ends_with("launchgate.yaml")));
    let mut all = Vec::new();
    for f in &files {
        let objs = parse_docs(&std::fs::read_to_string(f).unwrap());
        assert!(!objs.is_empty(), "{} is empty", f.display());
        check_all_objects(&objs);
        all.extend(objs);
    }
    let (m, v) = hooks_of(&all);
    check_hook(&m, "/mutate", "launchgate");
    check_hook(&v, "/validate", "launchgate");
    // The documented placeholder, replaced with base64(certs/ca.crt) at install.
    assert_eq!(ca_bundle(&m), "CA_BUNDLE_PLACEHOLDER_SEE_README");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(
        readme.contains("Q0FfQlVORExFX1BMQUNFSE9MREVSX1NFRV9SRUFETUU=")
            && readme.contains("launchgate certs")
    );

    // Same webhooks as the chart's default install (rules, paths, sideEffects, failurePolicy...).
    let chart = helm.render_static(&[]);
    let (cm, cv) = hooks_of(&chart);
    for (a, b) in [(&m, &cm), (&v, &cv)] {
        assert_eq!(a.name, b.name);
        assert_eq!(rule_targets(&a.rules), rule_targets(&b.rules));
        assert_eq!(a.client.service, b.client.service);
        assert_eq!(
            (&a.side_effects, &a.failure_policy, a.timeout),
            (&b.side_effects, &b.failure_policy, b.timeout)
        );
        assert_eq!(a.reinvocation, b.reinvocation);
        assert_eq!(a.namespace_selector, b.namespace_selector);
    }
    let (ok, _, stderr) = helm.check(&["manifests", "--check"]);
    assert!(
        ok,
        "manifests/launchgate.yaml differs from the chart: {stderr}"
    );
}

/// The paths and env vars the chart uses exist in the server: start the real server with the
/// chart's default config and call every path the webhooks and probes use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_paths_config_and_env_match_the_server() {
    let Some(helm) = helm() else { return };
    let objs = helm.render_static(&[]);
    let cm: ConfigMap = one(&objs, "ConfigMap");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, &cm.data.unwrap()["config.yaml"]).unwrap();
    let opts = launchgate::server::ServeOptions {
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        config: Some(config),
        ..options(dir.path())
    };
    let srv = start_with(opts, dir).await;
    let (m, v) = hooks_of(&objs);
    for h in [&m, &v] {
        let path = h.client.service.as_ref().unwrap().path.clone().unwrap();
        let resp = srv
            .post(
                &path,
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            )
            .await;
        assert_ne!(resp.status(), 404, "{path} is not a server route");
    }
    let d: Deployment = one(&objs, "Deployment");
    let c = webhook_container(&d);
    let admin = format!("http://{}", srv.server.admin_addr.unwrap());
    for probe in [&c.liveness_probe, &c.readiness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        let path = get.path.clone().unwrap();
        assert_eq!(get.scheme.as_deref(), Some("HTTP"));
        let resp = reqwest::get(format!("{admin}{path}")).await.unwrap();
        assert_eq!(resp.status(), 200, "probe {path} on the admin port");
        assert_eq!(
            srv.get_status(&path).await,
            200,
            "probe {path} on the HTTPS port too"
        );
    }
    srv.server.begin_shutdown();
    srv.server.wait().await.unwrap();

    // Every LAUNCHGATE_* variable the chart sets is one `launchgate serve` reads.
    let help = text(&launchgate(&["serve", "--help"]).stdout);
    for (name, _) in deployment_env(&d) {
        assert!(
            help.contains(&name),
            "{name} is not a `launchgate serve` env var:\n{help}"
        );
    }
    assert_eq!(c.args.as_deref(), Some(&["serve".to_string()][..]));
}

#[test]
fn chart_readme_documents_install_dry_run_bypass_and_every_value() {
    let readme = std::fs::read_to_string(root().join("charts/launchgate/README.md")).unwrap();
    for section in [
        "## Install on a cluster",
        "## Try it with `kubectl apply --dry-run=server`",
        "## Uninstall / emergency bypass",
    ] {
        assert!(readme.contains(section), "README lacks {section}");
    }
    assert!(readme.contains("kubectl delete validatingwebhookconfiguration"));
    // Every leaf value of values.yaml appears in the README's values table.
    let values: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("charts/launchgate/values.yaml")).unwrap(),
    )
    .unwrap();
    let mut keys = Vec::new();
    leaf_keys(&values, "", &mut keys);
    for k in keys {
        assert!(
            readme.contains(&format!("`{k}`")),
            "README does not document `{k}`"
        );
    }
}

/// Dotted paths of the values a user sets; free-form maps (config, resources...) stop at their key.
fn leaf_keys(v: &Value, prefix: &str, out: &mut Vec<String>) {
    const OPAQUE: [&str; 11] = [
        "config",
        "resources",
        "podSecurityContext",
        "securityContext",
        "livenessProbe",
        "readinessProbe",
        "updateStrategy",
        "webhook.objectSelector",
        "certs.certManager.issuerRef",
        "affinity",
        "webhook.namespaceSelector",
    ];
    match v {
        Value::Object(m) if !m.is_empty() && !OPAQUE.contains(&prefix) => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_keys(v, &p, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

/// The audit's objects in a render: (ServiceAccount, ClusterRole, ClusterRoleBinding, CronJob),
/// each optional, found by their `app.kubernetes.io/component: audit` label.
fn audit_objects(objs: &[Value]) -> Vec<&Value> {
    objs.iter()
        .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/component"] == "audit")
        .collect()
}

/// The objects of `objs` that are Helm hooks, as (kind, name, hook, weight, delete policy).
fn helm_hooks(objs: &[Value]) -> Vec<(String, String, String, i64, String)> {
    objs.iter()
        .filter_map(|o| {
            let a = &o["metadata"]["annotations"];
            let hook = a["helm.sh/hook"].as_str()?;
            Some((
                kind(o).to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
                hook.to_string(),
                a["helm.sh/hook-weight"]
                    .as_str()
                    .unwrap_or("0")
                    .parse()
                    .unwrap(),
                a["helm.sh/hook-delete-policy"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ))
        })
        .collect()
}

#[test]
fn scheduled_audit_is_absent_by_default() {
    let Some(helm) = helm() else { return };
    let objs = helm.render(&[]);
    assert!(of_kind(&objs, "CronJob").is_empty());
    // No audit ServiceAccount, ClusterRole or binding either (the webhook's own RBAC, for
    // Events and the uninstall hook, is not the audit's).
    assert!(audit_objects(&objs).is_empty());
}

#[test]
fn scheduled_audit_renders_a_cronjob_with_read_only_rbac() {
    let Some(helm) = helm() else { return };
    use k8s_openapi::api::batch::v1::CronJob;
    let objs = helm.render(&[
        "--set-json",
        r#"{"audit":{"enabled":true,"schedule":"*/30 * * * *","pageSize":200}}"#,
    ]);
    let (cronjobs, others): (Vec<Value>, Vec<Value>) =
        objs.iter().cloned().partition(|o| kind(o) == "CronJob");
    check_all_objects(&others);
    assert_eq!(cronjobs.len(), 1);
    round_trip::<CronJob>(&cronjobs[0]);
    let cron: CronJob = typed(&cronjobs[0]);
    assert_eq!(cron.metadata.namespace.as_deref(), Some(RELEASE_NS));
    let spec = cron.spec.unwrap();
    assert_eq!(spec.schedule, "*/30 * * * *");
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
    let job = spec.job_template.spec.unwrap();
    let pod = job.template.spec.unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.automount_service_account_token, Some(true));
    let c = &pod.containers[0];
    let args = c.args.clone().unwrap();
    assert_eq!(args[0], "audit");
    for a in ["--policy-reports", "--no-fail", "--page-size=200"] {
        assert!(args.iter().any(|x| x == a), "{args:?} lacks {a}");
    }

    // The same config as the webhook: same env path, same ConfigMap, mounted read-only.
    let deployment: Deployment = one(&objs, "Deployment");
    let config_env = |env: Vec<(String, String)>| {
        env.into_iter()
            .find(|(k, _)| k == "LAUNCHGATE_CONFIG")
            .map(|(_, v)| v)
    };
    let audit_env: Vec<(String, String)> = c
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        config_env(audit_env),
        config_env(deployment_env(&deployment))
    );
    let cm: ConfigMap = one(&objs, "ConfigMap");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.config_map.is_some())
        .expect("a ConfigMap volume");
    assert_eq!(
        volume.config_map.as_ref().unwrap().name,
        cm.metadata.name.unwrap()
    );
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == volume.name)
        .unwrap();
    assert_eq!(mount.read_only, Some(true));
    assert_eq!(mount.mount_path, "/etc/launchgate/config");

    // Its own ServiceAccount, bound to a ClusterRole that reads the launch workloads and writes
    // only PolicyReports.
    let sa_name = pod.service_account_name.clone().unwrap();
    let audit = audit_objects(&objs);
    assert!(
        audit
            .iter()
            .any(|o| kind(o) == "ServiceAccount" && o["metadata"]["name"] == sa_name.as_str())
    );
    let role: ClusterRole = typed(
        audit
            .iter()
            .find(|o| kind(o) == "ClusterRole")
            .expect("audit ClusterRole"),
    );
    let binding: ClusterRoleBinding = typed(
        audit
            .iter()
            .find(|o| kind(o) == "ClusterRoleBinding")
            .expect("audit ClusterRoleBinding"),
    );
    assert_eq!(binding.role_ref.name, role.metadata.name.clone().unwrap());
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(
        (subject.name.as_str(), subject.namespace.as_deref()),
        (sa_name.as_str(), Some(RELEASE_NS))
    );
    let mut granted: Vec<(String, String, String)> = Vec::new();
    for rule in role.rules.unwrap() {
        for g in rule.api_groups.unwrap() {
            for r in rule.resources.clone().unwrap() {
                for v in &rule.verbs {
                    granted.push((g.clone(), r.clone(), v.clone()));
                }
            }
        }
    }
    // Every registered kind's workloads, and the runtimes the audit lists to size the TrainJobs
    // that name one.
    let workloads: Vec<(&str, &str)> = launchgate::WorkloadKind::all()
        .map(|k| (k.api_resource().0, k.api_resource().2))
        .collect();
    assert!(workloads.contains(&("kubeflow.org", "mpijobs")));
    for (g, r) in workloads.into_iter().chain([
        ("trainer.kubeflow.org", "trainingruntimes"),
        ("trainer.kubeflow.org", "clustertrainingruntimes"),
    ]) {
        for v in ["get", "list"] {
            assert!(
                granted.contains(&(g.into(), r.into(), v.into())),
                "{g}/{r} {v}"
            );
        }
    }
    for v in ["get", "list", "create", "update", "patch"] {
        assert!(granted.contains(&("wgpolicyk8s.io".into(), "policyreports".into(), v.into())));
    }
    for (g, r, v) in &granted {
        let read = v == "get" || v == "list";
        let report_write = g == "wgpolicyk8s.io" && r == "policyreports";
        assert!(
            read || report_write,
            "the audit may only read, or write PolicyReports: {g}/{r} {v}"
        );
        assert!(g != "*" && r != "*" && v != "*");
    }

    // Audit pods are never selected by the webhook's Service, Deployment or PDB.
    let labels = job.template.metadata.unwrap().labels.unwrap();
    let service: Service = one(&objs, "Service");
    let selector = service.spec.unwrap().selector.unwrap();
    assert!(
        !selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
        "the webhook Service would send admission traffic to audit pods"
    );
    let deployment_selector = deployment.spec.unwrap().selector.match_labels.unwrap();
    assert!(
        !deployment_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    );

    // Without rbac.create the CronJob stays and no RBAC is made; without policyReports the
    // flag is gone.
    let objs = helm.render(&[
        "--set-json",
        r#"{"audit":{"enabled":true,"policyReports":false},"rbac":{"create":false}}"#,
    ]);
    assert!(
        audit_objects(&objs)
            .iter()
            .all(|o| kind(o) == "CronJob" || kind(o) == "ServiceAccount"),
        "audit RBAC rendered without rbac.create"
    );
    let cron = of_kind(&objs, "CronJob");
    let args = &cron[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        !args
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--policy-reports")
    );

    // OpenReports: the flag, and write access to openreports.io Reports instead of PolicyReports.
    let objs = helm.render(&[
        "--set-json",
        r#"{"audit":{"enabled":true,"reportFormat":"openreports"}}"#,
    ]);
    let cron = of_kind(&objs, "CronJob");
    let args = &cron[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--report-format=openreports"),
        "{args}"
    );
    let role = audit_objects(&objs)
        .into_iter()
        .find(|o| kind(o) == "ClusterRole")
        .expect("audit ClusterRole")
        .to_string();
    assert!(
        role.contains("openreports.io") && !role.contains("wgpolicyk8s.io"),
        "{role}"
    );
}

#[test]
fn bad_audit_values_fail_at_install_time() {
    let Some(helm) = helm() else { return };
    for bad in [
        r#"{"audit":{"enabeld":true}}"#,
        r#"{"audit":{"enabled":true,"pageSize":0}}"#,
        r#"{"audit":{"enabled":true,"schedule":""}}"#,
        r#"{"audit":{"enabled":true,"reportFormat":"openreport"}}"#,
    ] {
        let (ok, _, stderr) = helm.check(&["render", "--set-json", bad]);
        assert!(!ok, "values {bad} were accepted");
        assert!(stderr.contains("render failed"), "{bad}: {stderr}");
    }
}

/// `config` is checked at install time with the schema generated from the server's config
/// types: a misspelled key or a wrong value fails the install, while the full built-in
/// policy (every key, with nulls) installs.
#[test]
fn misspelled_config_key_fails_at_install_time() {
    let Some(helm) = helm() else { return };
    for (bad, key) in [
        (
            r#"{"config":{"queues":{"gpu-queue":{"jobDefaults":{"backofLimit":1}}}}}"#,
            "backofLimit",
        ),
        (r#"{"config":{"defaultQueeu":"gpu-queue"}}"#, "defaultQueeu"),
        (
            r#"{"config":{"queues":{"gpu-queue":{"limits":{"enforcement":"block"}}}}}"#,
            "enforcement",
        ),
        (
            r#"{"config":{"queues":{"gpu-queue":{"limits":{"variables":{"gpus":{"maximim":4}}}}}}}"#,
            "maximim",
        ),
    ] {
        let (ok, _, stderr) = helm.check(&["render", "--set-json", bad]);
        assert!(!ok, "config {bad} was accepted");
        assert!(
            stderr.contains("render failed") && stderr.contains(key),
            "{bad}: {stderr}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    let config: Value = serde_yaml::from_str(launchgate::policy::DEFAULT_CONFIG_YAML).unwrap();
    std::fs::write(
        &values,
        serde_yaml::to_string(&serde_json::json!({ "config": config })).unwrap(),
    )
    .unwrap();
    let objs = helm.render(&["-f", values.to_str().unwrap()]);
    let cm: ConfigMap = one(&objs, "ConfigMap");
    let rendered: Value = serde_yaml::from_str(&cm.data.unwrap()["config.yaml"]).unwrap();
    assert_eq!(rendered, config);
    // The pods roll on a config change by default.
    let d: Deployment = one(&objs, "Deployment");
    let annotations = d
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap();
    assert!(
        annotations.contains_key("checksum/config"),
        "{annotations:?}"
    );
}

#[test]
fn uninstall_removes_the_webhook_configurations_before_the_pods() {
    let Some(helm) = helm() else { return };
    let objs = helm.render(&[]);
    check_all_objects(&objs);
    let hooks = helm_hooks(&objs);
    assert_eq!(hooks.len(), 4, "{hooks:?}");
    for (k, _, hook, _, policy) in &hooks {
        assert_eq!(hook, "pre-delete", "{k}");
        assert!(
            policy.contains("hook-succeeded") && policy.contains("before-hook-creation"),
            "{k}: {policy}"
        );
    }
    // RBAC first, the Job after it.
    let weight = |k: &str| hooks.iter().find(|h| h.0 == k).unwrap().3;
    for k in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"] {
        assert!(weight(k) < weight("Job"), "{k} must come before the Job");
    }
    // The Job deletes exactly this release's two configurations, and may delete nothing else.
    let job: Job = typed(of_kind(&objs, "Job")[0]);
    let pod = job.spec.unwrap().template.spec.unwrap();
    let c = &pod.containers[0];
    assert_eq!(
        c.args.as_deref().unwrap(),
        [
            "delete-webhooks",
            "--mutating=launchgate",
            "--validating=launchgate"
        ]
    );
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(
        c.security_context
            .as_ref()
            .unwrap()
            .read_only_root_filesystem,
        Some(true)
    );
    let role: ClusterRole = of_kind(&objs, "ClusterRole")
        .into_iter()
        .find(|o| o["metadata"]["name"] == "launchgate-uninstall")
        .map(typed)
        .unwrap();
    for rule in role.rules.unwrap() {
        assert_eq!(rule.verbs, ["get", "delete"]);
        assert_eq!(
            rule.resource_names.as_deref(),
            Some(&["launchgate".to_string()][..])
        );
    }
    // The subcommand exists in the binary.
    let help = Command::new(env!("CARGO_BIN_EXE_launchgate"))
        .args(["delete-webhooks", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    // Plain manifests carry no hooks; off by value.
    let off = helm.render(&["--set-json", r#"{"uninstallHook":{"enabled":false}}"#]);
    assert!(helm_hooks(&off).is_empty());
}

#[test]
fn match_conditions_only_where_the_cluster_supports_them() {
    let Some(helm) = helm() else { return };
    for (version, expected) in [
        ("1.27.9", false),
        ("1.28.0", true),
        ("1.29.4", true),
        ("1.30.0", true),
        ("1.34.1", true),
    ] {
        let objs = helm.render_static(&["--kube-version", version]);
        let (m, v) = hooks_of(&objs);
        assert_eq!(
            (m.has_match_conditions, v.has_match_conditions),
            (expected, expected),
            "Kubernetes {version}"
        );
        check_hook(&m, "/mutate", "launchgate");
        check_hook(&v, "/validate", "launchgate");
    }
}

#[test]
fn probes_and_metrics_use_the_plain_port_when_client_certificates_are_required() {
    let Some(helm) = helm() else { return };
    let client_ca = r#"{"extraArgs":["--client-ca=/etc/launchgate/client-ca/ca.crt"],
        "extraVolumes":[{"name":"client-ca","configMap":{"name":"apiserver-client-ca"}}],
        "extraVolumeMounts":[{"name":"client-ca","mountPath":"/etc/launchgate/client-ca"}],
        "serviceMonitor":{"enabled":true}}"#;
    let objs = helm.render(&["--set-json", client_ca]);
    check_all_objects(&objs);
    let d: Deployment = one(&objs, "Deployment");
    let c = webhook_container(&d);
    assert!(
        c.args
            .as_ref()
            .unwrap()
            .iter()
            .any(|a| a.starts_with("--client-ca"))
    );
    for probe in [&c.liveness_probe, &c.readiness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.scheme.as_deref(), Some("HTTP"));
        assert_eq!(serde_json::to_value(&get.port).unwrap(), "admin");
    }
    let sm = of_kind(&objs, "ServiceMonitor")[0];
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(
        (ep["port"].as_str(), ep["scheme"].as_str()),
        (Some("admin"), Some("http"))
    );
    assert!(ep["tlsConfig"].is_null());
    let svc: Service = one(&objs, "Service");
    assert!(
        svc.spec
            .unwrap()
            .ports
            .unwrap()
            .iter()
            .any(|p| p.name.as_deref() == Some("admin") && p.port == 8080)
    );
    // Without the admin port everything goes back to HTTPS.
    let objs = helm.render(&[
        "--set-json",
        r#"{"adminPort":0,"serviceMonitor":{"enabled":true}}"#,
    ]);
    let d: Deployment = one(&objs, "Deployment");
    let c = webhook_container(&d);
    let get = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(get.scheme.as_deref(), Some("HTTPS"));
    assert_eq!(serde_json::to_value(&get.port).unwrap(), "https");
    assert!(
        !deployment_env(&d)
            .iter()
            .any(|(n, _)| n == "LAUNCHGATE_ADMIN_LISTEN")
    );
    assert_eq!(
        of_kind(&objs, "ServiceMonitor")[0]["spec"]["endpoints"][0]["scheme"],
        "https"
    );
}

#[test]
fn prometheus_rule_dashboard_and_network_policy_render() {
    let Some(helm) = helm() else { return };
    let objs = helm.render(&[
        "--set-json",
        r#"{"prometheusRule":{"enabled":true},"grafanaDashboard":{"enabled":true},
            "networkPolicy":{"enabled":true,"adminFrom":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]}}"#,
    ]);
    check_all_objects(&objs);
    let rule = of_kind(&objs, "PrometheusRule")[0];
    let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    for a in [
        "LaunchgateCertificateExpiresSoon",
        "LaunchgateCertificateReloadFailed",
        "LaunchgateConfigReloadFailed",
        "LaunchgateOverloaded",
        "LaunchgateInternalError",
        "LaunchgateSlow",
        "LaunchgateRedundancyLost",
        "LaunchgateEventsFailing",
    ] {
        assert!(alerts.contains(&a), "{a} missing: {alerts:?}");
    }
    for r in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
        let expr = r["expr"].as_str().unwrap();
        assert!(expr.contains(r#"namespace="launchgate""#), "{expr}");
        assert!(!expr.contains("{{"), "unrendered template: {expr}");
    }
    // The alerts are the ones docs/operations.md lists.
    let doc = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    for a in &alerts {
        assert!(doc.contains(a), "docs/operations.md does not list {a}");
    }
    // The dashboard: a ConfigMap for the Grafana sidecar with valid dashboard JSON.
    let cm: ConfigMap = of_kind(&objs, "ConfigMap")
        .into_iter()
        .find(|o| o["metadata"]["name"] == "launchgate-dashboard")
        .map(typed)
        .expect("dashboard ConfigMap");
    assert_eq!(
        cm.metadata.labels.as_ref().unwrap()["grafana_dashboard"],
        "1"
    );
    let dash: Value = serde_json::from_str(&cm.data.unwrap()["launchgate.json"]).unwrap();
    let exprs = dash["panels"].to_string();
    for metric in [
        "launchgate_decisions_total",
        "launchgate_violations_total",
        "launchgate_admission_duration_seconds_bucket",
        "launchgate_events_total",
    ] {
        assert!(exprs.contains(metric), "dashboard lacks {metric}");
    }
    // NetworkPolicy: the webhook port from anywhere, the admin port from monitoring only.
    let np: NetworkPolicy = one(&objs, "NetworkPolicy");
    let ingress = np.spec.unwrap().ingress.unwrap();
    assert_eq!(ingress.len(), 2);
    assert!(ingress[0].from.is_none());
    assert_eq!(ingress[1].from.as_ref().unwrap().len(), 1);
    // Off by default.
    let objs = helm.render(&[]);
    assert!(
        of_kind(&objs, "PrometheusRule").is_empty() && of_kind(&objs, "NetworkPolicy").is_empty()
    );
}

#[test]
fn owner_watch_is_scoped_to_the_given_namespaces_and_launch_jobs() {
    let Some(helm) = helm() else { return };
    let objs = helm.render(&[
        "--set-json",
        r#"{"clusterLookups":true,"events":{"enabled":false},"ownerWatch":{"namespaces":["wandb","team-a"]}}"#,
    ]);
    let d: Deployment = one(&objs, "Deployment");
    let env = deployment_env(&d);
    assert!(env.contains(&(
        "LAUNCHGATE_OWNER_WATCH_NAMESPACES".into(),
        "wandb,team-a".into()
    )));
    assert!(env.contains(&(
        "LAUNCHGATE_OWNER_WATCH_SELECTOR".into(),
        "wandb.ai/monitor".into()
    )));
    // A Role in each watched namespace, no cluster-wide read.
    let mut role_ns: Vec<String> = of_kind(&objs, "Role")
        .into_iter()
        .filter(|o| o["metadata"]["name"] != "launchgate-launchqueues")
        .map(|o| {
            let r: Role = typed(o);
            assert_eq!(
                granted(&r.rules.unwrap()),
                watched_resources(|w| w.namespaced)
            );
            r.metadata.namespace.unwrap()
        })
        .collect();
    role_ns.sort();
    assert_eq!(role_ns, ["team-a", "wandb"]);
    // And the LaunchQueues' Lease, in the release namespace.
    assert_eq!(of_kind(&objs, "RoleBinding").len(), 3);
    assert!(
        of_kind(&objs, "ClusterRole").iter().all(|o| {
            o["metadata"]["annotations"]["helm.sh/hook"].is_string()
                || o["metadata"]["name"] == "launchgate-webhooks"
                || o["metadata"]["name"] == "launchgate-launchqueues"
                || (o["metadata"]["name"] == "launchgate-bypass"
                    && o["rules"]
                        == serde_json::json!([{"apiGroups": [""], "resources": ["namespaces"],
                        "resourceNames": [RELEASE_NS], "verbs": ["get"]}]))
                || (o["metadata"]["name"] == "launchgate-runtimes"
                    && granted(&typed::<ClusterRole>(o).rules.unwrap())
                        == watched_resources(|w| !w.namespaced))
        }),
        "only the uninstall hook's ClusterRole, the webhook registration's, the read of the release namespace and the read of what the server watches that is cluster-scoped"
    );
    // All namespaces: one ClusterRole.
    let objs = helm.render(&[
        "--set-json",
        r#"{"clusterLookups":true,"events":{"enabled":false}}"#,
    ]);
    assert!(
        of_kind(&objs, "Role")
            .iter()
            .all(|o| o["metadata"]["name"] == "launchgate-launchqueues")
    );
    let d: Deployment = one(&objs, "Deployment");
    assert!(deployment_env(&d).contains(&("LAUNCHGATE_OWNER_WATCH_NAMESPACES".into(), "".into())));
}

#[test]
fn the_default_image_says_it_must_be_built_and_pushed() {
    let Some(helm) = helm() else { return };
    let objs = helm.render(&[]);
    let d: Deployment = one(&objs, "Deployment");
    let image = d.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone()
        .unwrap();
    assert!(
        image.starts_with("build-and-push.invalid/launchgate:"),
        "{image}"
    );
    let notes =
        std::fs::read_to_string(root().join("charts/launchgate/templates/NOTES.txt")).unwrap();
    assert!(notes.contains("build-and-push.invalid"));
}

/// `audit.installReportCrd` ships the upstream OpenReports Report CRD, unchanged but for the
/// chart's labels and the keep-on-uninstall annotation; off by default.
#[test]
fn the_openreports_crd_ships_with_the_chart_when_asked() {
    let Some(helm) = helm() else { return };
    let crds = |objs: &[Value]| -> Vec<Value> {
        of_kind(objs, "CustomResourceDefinition")
            .into_iter()
            .cloned()
            .collect()
    };
    assert!(crds(&helm.render(&[])).is_empty());
    let objs = helm.render(&[
        "--set-json",
        r#"{"audit":{"enabled":true,"reportFormat":"openreports","installReportCrd":true}}"#,
    ]);
    let shipped = crds(&objs);
    assert_eq!(shipped.len(), 1, "{shipped:?}");
    let mut shipped = shipped[0].clone();
    assert_eq!(
        shipped["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    assert_eq!(
        shipped["metadata"]["labels"]["app.kubernetes.io/name"],
        "launchgate"
    );
    let text = common::crd_text("openreports.io_reports.yaml");
    let upstream: Value = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .find(|v: &Value| v["kind"] == "CustomResourceDefinition")
        .unwrap();
    let meta = shipped["metadata"].as_object_mut().unwrap();
    meta.remove("labels");
    meta["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("helm.sh/resource-policy");
    assert_eq!(shipped, upstream, "the shipped CRD differs from upstream");
}

#[test]
fn otlp_tracing_renders_the_standard_otel_environment_and_is_off_by_default() {
    let Some(helm) = helm() else { return };
    let off: Deployment = one(&helm.render(&[]), "Deployment");
    let names: Vec<String> = deployment_env(&off).into_iter().map(|(n, _)| n).collect();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("OTEL_") || n == "LAUNCHGATE_OTLP_TRACES"),
        "{names:?}"
    );
    let objs = helm.render(&[
        "--set-json",
        r#"{"tracing":{"otlp":{"enabled":true,"endpoint":"http://otel-collector.observability:4318","serviceName":"admission","sampler":"parentbased_traceidratio","samplerArg":"0.25","resourceAttributes":{"team":"ml"},"extraEnv":[{"name":"OTEL_BSP_MAX_QUEUE_SIZE","value":"4096"}]}}}"#,
    ]);
    check_all_objects(&objs);
    let d: Deployment = one(&objs, "Deployment");
    let env = deployment_env(&d);
    let value = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{name} not set: {env:?}"))
    };
    assert_eq!(value("LAUNCHGATE_OTLP_TRACES"), "true");
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://otel-collector.observability:4318"
    );
    assert_eq!(value("OTEL_SERVICE_NAME"), "admission");
    assert_eq!(value("OTEL_TRACES_SAMPLER"), "parentbased_traceidratio");
    assert_eq!(value("OTEL_TRACES_SAMPLER_ARG"), "0.25");
    assert_eq!(value("OTEL_BSP_MAX_QUEUE_SIZE"), "4096");
    assert_eq!(
        value("OTEL_RESOURCE_ATTRIBUTES"),
        "k8s.namespace.name=launchgate,k8s.pod.name=$(LAUNCHGATE_POD_NAME),k8s.deployment.name=launchgate,team=ml"
    );
    // `$(LAUNCHGATE_POD_NAME)` expands only when that variable comes first.
    let position = |name: &str| env.iter().position(|(n, _)| n == name).unwrap();
    assert!(position("LAUNCHGATE_POD_NAME") < position("OTEL_RESOURCE_ATTRIBUTES"));
    // Every variable the chart sets is one `launchgate serve --help` names.
    let help = text(&launchgate(&["serve", "--help"]).stdout);
    for (name, _) in &env {
        assert!(
            help.contains(name.as_str()),
            "{name} is not in `serve --help`"
        );
    }
    // Only what is set is rendered.
    let objs = helm.render(&["--set-json", r#"{"tracing":{"otlp":{"enabled":true}}}"#]);
    let names: Vec<String> = deployment_env(&one(&objs, "Deployment"))
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.contains("OTLP") || n.starts_with("OTEL_"))
        .collect();
    assert_eq!(
        names,
        ["LAUNCHGATE_OTLP_TRACES", "OTEL_RESOURCE_ATTRIBUTES"]
    );
}

/// The labels that mark a launch workload and those that only name its queue are the server's
/// in the chart's `matchConditions`, with the defaults and with a config's own lists: the
/// chart's `launch-workload` condition tests exactly the marking labels (a
/// `match.queueNameLabels` label such as `queue` never sends an object), on the object and every
/// pod template of every kind, and both its `launch-workload` and its `relevant-update`
/// conditions are the server's (a changed name-only label is still sent).
#[test]
fn a_label_that_only_names_a_queue_marks_nothing_in_the_chart_as_in_the_server() {
    let Some(helm) = helm() else { return };
    let cases: [(&str, &[&str], &[&str]); 4] = [
        (
            "{}",
            &["wandb.ai/monitor", "wandb.ai/agent", "launchgate.io/queue"],
            &["queue"],
        ),
        (
            r#"{"config":{"match":{"queueLabels":["acme.io/queue"],"queueNameLabels":["team-queue"]}}}"#,
            &["wandb.ai/monitor", "wandb.ai/agent", "acme.io/queue"],
            &["team-queue", "queue", "launchgate.io/queue"],
        ),
        (
            r#"{"config":{"match":{"launchLabels":["acme.io/launch"],"queueNameLabels":[]}}}"#,
            &["acme.io/launch", "launchgate.io/queue"],
            &["queue", "wandb.ai/monitor"],
        ),
        (
            r#"{"webhook":{"matchConditions":{"labels":["acme.io/launch"]}}}"#,
            &["acme.io/launch"],
            &["queue", "launchgate.io/queue", "wandb.ai/monitor"],
        ),
    ];
    for (values, marking, not_marking) in cases {
        let statically = helm.render_static(&["--set-json", values]);
        let server = server_registered(&helm.render(&["--set-json", values]));
        let mutating = |objs: &[Value]| -> Value {
            objs.iter()
                .find(|o| o["kind"] == "MutatingWebhookConfiguration")
                .map(|o| o["webhooks"][0].clone())
                .expect("a mutating webhook")
        };
        let (chart, served) = (mutating(&statically), mutating(&server));
        let launch = chart["matchConditions"][0]["expression"].as_str().unwrap();
        // The keys tested, the list literal the condition ends with.
        let (_, keys) = launch
            .rsplit_once("c.metadata.labels) && [")
            .expect("a list of label keys");
        let keys = keys.split("].exists(").next().unwrap();
        for key in marking {
            assert!(
                keys.contains(&format!("'{key}'")),
                "{values}: {key} does not mark in {keys}"
            );
        }
        for key in not_marking {
            assert!(
                !keys.contains(&format!("'{key}'")),
                "{values}: {key} marks in {keys}"
            );
        }
        assert_eq!(
            chart["matchConditions"][0], served["matchConditions"][0],
            "{values}: the chart's launch-workload is not the server's (it looks for labels elsewhere)"
        );
        assert_eq!(
            chart["matchConditions"][1], served["matchConditions"][1],
            "{values}: the chart's relevant-update is not the server's"
        );
    }
}

/// The emergency bypass: the pods may read their own namespace — `get`, by name, nothing else —
/// whenever they talk to the API server, and while the release namespace carries the annotation
/// `launchgate.io/bypass`, `helm upgrade` with `webhook.registration: chart` renders no webhook
/// configuration (the runbook's bypass deleted them; an upgrade must not bring them back) and
/// leaves the native policy slots to the pods as ever. Without the annotation it renders both.
#[test]
fn the_chart_honours_the_emergency_bypass() {
    let Some(helm) = helm() else { return };
    let values = r#"{"policyMode":"hybrid","nativePolicySlots":1}"#;
    let namespace = |annotations: Value| {
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": RELEASE_NS, "annotations": annotations}})
    };
    let dir = tempfile::tempdir().unwrap();
    let render_with = |ns: Value| {
        let existing = dir.path().join("existing.json");
        std::fs::write(&existing, ns.to_string()).unwrap();
        helm.render_static(&[
            "--set-json",
            values,
            "--existing",
            existing.to_str().unwrap(),
        ])
    };
    let normal = render_with(namespace(serde_json::json!({"team": "platform"})));
    assert_eq!(of_kind(&normal, "ValidatingWebhookConfiguration").len(), 1);
    assert_eq!(of_kind(&normal, "MutatingWebhookConfiguration").len(), 1);
    let bypassed = render_with(namespace(
        serde_json::json!({"launchgate.io/bypass": "alice: INC-7"}),
    ));
    assert!(of_kind(&bypassed, "ValidatingWebhookConfiguration").is_empty());
    assert!(of_kind(&bypassed, "MutatingWebhookConfiguration").is_empty());
    assert_eq!(
        of_kind(&bypassed, "ValidatingAdmissionPolicy").len(),
        of_kind(&normal, "ValidatingAdmissionPolicy").len()
    );

    // The pods' right to read the annotation: get on their own namespace, by name, alone.
    for values in [
        r#"{"policyMode":"hybrid"}"#,
        r#"{"policyMode":"webhook"}"#,
        r#"{"policyMode":"native"}"#,
    ] {
        let objs = helm.render(&["--set-json", values]);
        let namespace_rules: Vec<&Value> = of_kind(&objs, "ClusterRole")
            .into_iter()
            .chain(of_kind(&objs, "Role"))
            .filter(|r| r["metadata"]["annotations"]["helm.sh/hook"].is_null())
            .flat_map(|r| r["rules"].as_array().unwrap().iter())
            .filter(|rule| {
                rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == "namespaces")
            })
            .collect();
        assert_eq!(
            namespace_rules,
            [
                &serde_json::json!({"apiGroups": [""], "resources": ["namespaces"],
                "resourceNames": [RELEASE_NS], "verbs": ["get"]})
            ],
            "{values}"
        );
    }
    // No token, no read: webhook mode, chart registration, no Events, no lookups, no
    // LaunchQueues.
    let quiet = helm.render_static(&[
        "--set-json",
        r#"{"events":{"enabled":false},"launchQueues":{"enabled":false}}"#,
    ]);
    assert!(
        of_kind(&quiet, "ClusterRole")
            .iter()
            .all(|r| !r["metadata"]["name"].as_str().unwrap().ends_with("-bypass"))
    );
}

/// The chart README's cert-manager install (`charts/launchgate/README.md`, the site's
/// docs/chart.md): its `helm install` rendered by Helm's library with the block's own release,
/// namespace and `--set` values — everything `helm install` does short of applying, which needs
/// cert-manager's CRDs in the cluster (no CI machine has them) — holds what the page says: a
/// self-signed root Issuer, a 10-year CA Certificate, a CA Issuer and a serving Certificate of
/// 90 days renewed 30 days before expiry, for the Service's name, into the Secret the pods
/// mount; no certificate of the chart's own.
#[test]
fn the_readme_cert_manager_install_renders_what_the_page_says() {
    let Some(helm) = helm() else { return };
    let marker =
        "covered by helm_chart::the_readme_cert_manager_install_renders_what_the_page_says";
    let blocks = common::docs::marked_blocks("charts/launchgate/README.md", marker);
    assert_eq!(blocks.len(), 1, "one block marked for this test");
    let command = blocks[0].body.join("\n").replace("\\\n", " ");
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(
        &words[..4],
        ["helm", "install", "launchgate", "charts/launchgate"],
        "{command}"
    );
    let (release, mut namespace, mut values) = (words[2], "default", Vec::new());
    let mut rest = words[4..].iter();
    while let Some(word) = rest.next() {
        match *word {
            "--namespace" => namespace = rest.next().expect("--namespace's value"),
            "--create-namespace" => {}
            "--set" => {
                let (key, value) = rest
                    .next()
                    .and_then(|kv| kv.split_once('='))
                    .expect("--set K=V");
                let mut set = Value::String(value.into());
                for part in key.rsplit('.') {
                    set = json!({ part: set });
                }
                values.push(set.to_string());
            }
            other => {
                panic!("the block's `helm install` has {other:?}, which this test does not read")
            }
        }
    }
    let mut args = vec!["--namespace", namespace, "--release", release];
    for set in &values {
        args.extend(["--set-json", set.as_str()]);
    }
    let objs = helm.render(&args);
    check_all_objects(&objs);
    let issuers = of_kind(&objs, "Issuer");
    assert!(
        issuers.iter().any(|i| i["spec"]["selfSigned"].is_object()),
        "no self-signed root Issuer: {issuers:?}"
    );
    let certificates = of_kind(&objs, "Certificate");
    let ca = certificates
        .iter()
        .find(|c| c["spec"]["isCA"] == json!(true))
        .expect("a CA Certificate");
    assert_eq!(ca["spec"]["duration"], "87600h", "10 years");
    let ca_secret = &ca["spec"]["secretName"];
    assert!(
        issuers
            .iter()
            .any(|i| i["spec"]["ca"]["secretName"] == *ca_secret),
        "no CA Issuer of the CA Certificate's Secret {ca_secret}: {issuers:?}"
    );
    let serving = certificates
        .iter()
        .find(|c| c["spec"]["isCA"] != json!(true))
        .expect("a serving Certificate");
    assert_eq!(
        (
            &serving["spec"]["duration"],
            &serving["spec"]["renewBefore"]
        ),
        (&json!("2160h"), &json!("720h")),
        "90 days, renewed 30 days before expiry"
    );
    assert!(
        serving["spec"]["dnsNames"]
            .as_array()
            .is_some_and(|names| names.contains(&json!(format!("{release}.{namespace}.svc")))),
        "the serving Certificate does not name the Service: {serving}"
    );
    let secret = serving["spec"]["secretName"].as_str().expect("its Secret");
    let deployment = of_kind(&objs, "Deployment")[0];
    assert!(
        deployment["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["secret"]["secretName"] == secret),
        "the pods do not mount {secret}"
    );
    assert!(
        of_kind(&objs, "Secret")
            .iter()
            .all(|s| s["metadata"]["name"] != secret),
        "the chart made {secret} itself"
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .map(|i| i.starts_with("registry.example.com/launchgate:")),
        Some(true),
        "the block's image"
    );
}
