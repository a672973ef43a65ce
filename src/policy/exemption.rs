//! Exemptions: which requests launchgate leaves alone.
//!
//! A label is not an identity: whoever creates an object writes its labels. An exemption is
//! therefore decided by the request — who sends it (`userInfo`: users, groups, service
//! accounts) and where (its namespace) — and labels only narrow it further, the way
//! Gatekeeper's exempt users and Kyverno's PolicyExceptions are written.

use crate::admission::AdmissionRequest;
use crate::error::ConfigError;
use crate::patch::{MapNode, Node, Step};
use crate::workload::{self, WorkloadKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use wildmatch::WildMatch;

/// Groups that every (authenticated, or anonymous) requester is in: exempting one of them
/// would exempt everyone.
const EVERY_REQUESTER_GROUPS: [&str; 2] = ["system:authenticated", "system:unauthenticated"];

/// The group every service account is in.
const EVERY_SERVICE_ACCOUNT_GROUP: &str = "system:serviceaccounts";

/// The username prefix the API server gives a service account.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// True when a wildcard pattern has no literal character and so matches every name of some
/// length on (`*`, `?*`, `**`): every user, group or namespace there is.
fn matches_anything(pattern: &str) -> bool {
    pattern.contains('*') && pattern.chars().all(|c| c == '*' || c == '?')
}

/// Usernames as unlike each other as names get: a user pattern that matches all of them
/// (`?*`, `*`, `*:*`…) is written for everyone, not for someone.
const USER_PROBES: [&str; 5] = [
    "a",
    "alice",
    "oidc:bob@example.com",
    "system:node:gpu-7",
    "system:serviceaccount:q:z",
];

/// Service-account usernames of different namespaces and names, short and long: a pattern that
/// matches all of them (`system:serviceaccount:*`, `system:*`, `*:*:*:*`) is every service
/// account.
const SERVICE_ACCOUNT_PROBES: [&str; 3] = [
    "system:serviceaccount:a:b",
    "system:serviceaccount:kube-system:job-controller",
    "system:serviceaccount:team-9x:w",
];

/// The per-namespace groups every service account is in (`system:serviceaccounts:<ns>`),
/// for namespaces as unlike each other as names get.
const SERVICE_ACCOUNT_GROUP_PROBES: [&str; 3] = [
    "system:serviceaccounts:a",
    "system:serviceaccounts:kube-system",
    "system:serviceaccounts:team-9x",
];

fn matches_all(pattern: &str, probes: &[&str]) -> bool {
    let p = WildMatch::new(pattern);
    probes.iter().all(|probe| p.matches(probe))
}

/// Whom a `users` pattern covers when that is everyone (or every service account).
pub(crate) fn user_pattern_covers_everyone(pattern: &str) -> Option<&'static str> {
    if matches_anything(pattern) || matches_all(pattern, &USER_PROBES) {
        Some("every user")
    } else if matches_all(pattern, &SERVICE_ACCOUNT_PROBES) {
        Some("every service account")
    } else {
        None
    }
}

/// Whom a `groups` pattern covers when that is everyone (or every service account): a group
/// every requester is in, or the groups every service account is in.
fn group_pattern_covers_everyone(pattern: &str) -> Option<&'static str> {
    let p = WildMatch::new(pattern);
    if matches_anything(pattern) || EVERY_REQUESTER_GROUPS.iter().any(|g| p.matches(g)) {
        Some("every requester")
    } else if p.matches(EVERY_SERVICE_ACCOUNT_GROUP)
        || matches_all(pattern, &SERVICE_ACCOUNT_GROUP_PROBES)
    {
        Some("every service account")
    } else {
        None
    }
}

/// One exemption: requests it covers are allowed untouched (no mutation, no limit).
///
/// It applies when the request comes from one of its `users`, `groups` or `serviceAccounts`
/// (when any is set), in one of its `namespaces` (when set), for an object that carries all of
/// its `labels` itself (when set) and whose every container runs one of its `images` with the
/// image's own entrypoint (when set). `labels` and `images` need a requester condition.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Exemption {
    /// Named in logs, in the `launchgate.io/exempted-by` audit annotation and in warnings
    /// when it does not apply.
    pub name: String,
    /// Usernames (`userInfo.username`); `*` and `?` are wildcards.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups (`userInfo.groups`); `*` and `?` are wildcards.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Service accounts as `namespace/name`; `*` and `?` are wildcards
    /// (`wandb/wandb-launch-serviceaccount-*`).
    #[serde(default)]
    pub service_accounts: Vec<String>,
    /// Namespaces of the request (any when empty); `*` and `?` are wildcards.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Labels (with these values) that the object itself (its own `metadata.labels`, not a
    /// pod template's) must carry too. Only together with `users`, `groups` or
    /// `serviceAccounts`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Container images (`*` and `?` are wildcards): every container and init container of
    /// the object's pod templates (of the pod) must run one of them, with the image's own
    /// entrypoint (no `command`). Only together with `users`, `groups` or `serviceAccounts`.
    #[serde(default)]
    pub images: Vec<String>,
}

/// Who sends a request, and where: what exemptions are decided by.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    /// `userInfo.username` (empty when the request carries none, e.g. offline in the CLI).
    pub username: &'a str,
    /// `userInfo.groups`.
    pub groups: &'a [Value],
    /// `request.namespace` (empty for cluster-scoped objects).
    pub namespace: &'a str,
}

impl<'a> Requester<'a> {
    /// The requester of an admission request.
    pub fn of(request: &'a AdmissionRequest) -> Self {
        let groups = request
            .user_info
            .as_ref()
            .and_then(|u| u.get("groups"))
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        Requester {
            username: request.username(),
            groups,
            namespace: request.namespace.as_deref().unwrap_or_default(),
        }
    }

    fn groups(&self) -> impl Iterator<Item = &'a str> {
        self.groups.iter().filter_map(Value::as_str)
    }

    /// `namespace/name` when the requester is a service account.
    fn service_account(&self) -> Option<String> {
        let rest = self.username.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
        let (namespace, name) = rest.split_once(':')?;
        Some(format!("{namespace}/{name}"))
    }

    /// Who sends the request, for a message: `service account "ns/name"`, `user "alice"`.
    pub(crate) fn describe(&self) -> String {
        match (self.username, self.service_account()) {
            ("", _) => "an unidentified requester (no userInfo, as offline)".to_string(),
            (_, Some(sa)) => format!("service account {sa:?}"),
            (user, None) => format!("user {user:?}"),
        }
    }
}

/// True when `value` matches one of `patterns` (`*` and `?` are wildcards).
pub(super) fn any_match<S: AsRef<str>>(patterns: &[S], value: &str) -> bool {
    patterns
        .iter()
        .any(|p| WildMatch::new(p.as_ref()).matches(value))
}

/// How one exemption relates to a request.
enum Fit {
    /// It applies: the request is exempt.
    Applies,
    /// The object carries its labels, but who or where does not fit: why, for the user.
    LabelsOnly(String),
    /// It is about something else.
    Unrelated,
}

impl Exemption {
    fn has_requester(&self) -> bool {
        !(self.users.is_empty() && self.groups.is_empty() && self.service_accounts.is_empty())
    }

    /// True when the exemption covers `namespace` (it names none: every namespace).
    fn covers_namespace(&self, namespace: &str) -> bool {
        self.namespaces.is_empty() || any_match(&self.namespaces, namespace)
    }

    fn requester_fits(&self, who: &Requester<'_>) -> bool {
        !self.has_requester()
            || any_match(&self.users, who.username)
            || who.groups().any(|g| any_match(&self.groups, g))
            || who
                .service_account()
                .is_some_and(|sa| any_match(&self.service_accounts, &sa))
    }

    fn labels_fit(&self, object: &Value) -> bool {
        self.labels.is_empty()
            || object.as_object().is_some_and(|o| {
                self.labels
                    .iter()
                    .all(|(k, v)| workload::label(o, k) == Some(v.as_str()))
            })
    }

    /// `None` when every container of the object runs one of `images` with the image's own
    /// entrypoint (or no `images` are set); else what does not.
    fn images_misfit(&self, kind: WorkloadKind, object: &Value) -> Option<String> {
        if self.images.is_empty() {
            return None;
        }
        let mut seen = 0;
        for (_, template) in workload::templates(kind, object) {
            let Some(spec) = workload::pod_spec(template) else {
                continue;
            };
            for (_, container) in workload::containers(spec, &[]) {
                seen += 1;
                let name = workload::name_in(container).unwrap_or_default();
                let image = container
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if !any_match(&self.images, image) {
                    return Some(format!(
                        "container {name:?} runs image {image:?}, not one of {}",
                        self.images.join(", ")
                    ));
                }
                if container.get("command").is_some_and(|c| !c.is_null()) {
                    return Some(format!(
                        "container {name:?} replaces the entrypoint of {image:?} with a command"
                    ));
                }
            }
        }
        (seen == 0).then(|| "it has no containers to compare with its images".to_string())
    }

    fn fit(&self, who: &Requester<'_>, kind: WorkloadKind, object: &Value) -> Fit {
        let labels = self.labels_fit(object);
        let requester = self.requester_fits(who);
        let place = self.covers_namespace(who.namespace);
        if !labels {
            return Fit::Unrelated;
        }
        let shape = if requester && place {
            self.images_misfit(kind, object)
        } else {
            None
        };
        if requester && place && shape.is_none() {
            return Fit::Applies;
        }
        if self.labels.is_empty() {
            return Fit::Unrelated;
        }
        let mut why = Vec::new();
        if !requester {
            let mut allowed = Vec::new();
            for (what, list) in [
                ("service accounts", &self.service_accounts),
                ("users", &self.users),
                ("groups", &self.groups),
            ] {
                if !list.is_empty() {
                    allowed.push(format!("{what} {}", list.join(", ")));
                }
            }
            why.push(format!(
                "it comes from {}, not from its {}",
                who.describe(),
                allowed.join(" or ")
            ));
        }
        if !place {
            why.push(format!(
                "namespace {:?} is not one of {}",
                who.namespace,
                self.namespaces.join(", ")
            ));
        }
        why.extend(shape);
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        Fit::LabelsOnly(format!(
            "launchgate: exemption {:?} does not apply although the object carries {}: {}; a label alone exempts nothing",
            self.name,
            labels.join(","),
            why.join(" and ")
        ))
    }

    /// Reports what makes this exemption unsafe or unusable, at `at` (`match.exemptions[0]`).
    pub fn check(&self, at: &str, errors: &mut Vec<ConfigError>) {
        if self.name.trim().is_empty() {
            errors.push(ConfigError::new(
                format!("{at}.name"),
                "an exemption needs a name (it is shown when it applies or does not)",
            ));
        }
        if !self.has_requester() && self.namespaces.is_empty() {
            errors.push(ConfigError::new(
                at,
                "an exemption names who (users, groups, serviceAccounts) or where (namespaces); this one would exempt every request",
            ));
        }
        if !self.labels.is_empty() && !self.has_requester() {
            errors.push(ConfigError::new(
                format!("{at}.labels"),
                "a label exemption also needs users, groups or serviceAccounts: whoever creates an object writes its labels, so a label alone would let anyone opt out",
            ));
        }
        if !self.images.is_empty() && !self.has_requester() {
            errors.push(ConfigError::new(
                format!("{at}.images"),
                "an image exemption also needs users, groups or serviceAccounts: whoever creates an object chooses its images, so an image alone would let anyone opt out",
            ));
        }
        for (i, user) in self.users.iter().enumerate() {
            if let Some(whom) = user_pattern_covers_everyone(user) {
                errors.push(ConfigError::new(
                    format!("{at}.users[{i}]"),
                    format!("{user:?} matches {whom}: it would exempt them all"),
                ));
            }
        }
        for (i, group) in self.groups.iter().enumerate() {
            if let Some(whom) = group_pattern_covers_everyone(group) {
                errors.push(ConfigError::new(
                    format!("{at}.groups[{i}]"),
                    format!("{group:?} covers {whom}: it would exempt them all"),
                ));
            }
        }
        for (i, sa) in self.service_accounts.iter().enumerate() {
            let path = format!("{at}.serviceAccounts[{i}]");
            match sa.split_once('/') {
                Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                    if matches_anything(ns) && matches_anything(name) {
                        errors.push(ConfigError::new(
                            path,
                            format!(
                                "{sa:?} matches every service account: it would exempt them all"
                            ),
                        ));
                    }
                }
                _ => errors.push(ConfigError::new(
                    path,
                    format!("{sa:?} is not `namespace/name`"),
                )),
            }
        }
        if !self.has_requester() && self.namespaces.iter().any(|n| matches_anything(n)) {
            errors.push(ConfigError::new(
                format!("{at}.namespaces"),
                "matches every namespace: this would exempt every request",
            ));
        }
    }
}

/// Checks a list of exemptions (each, and that names are unique) at `at`.
pub fn check_all(exemptions: &[Exemption], at: &str, errors: &mut Vec<ConfigError>) {
    let mut names = BTreeSet::new();
    for (i, e) in exemptions.iter().enumerate() {
        let here = format!("{at}[{i}]");
        e.check(&here, errors);
        if !e.name.trim().is_empty() && !names.insert(e.name.as_str()) {
            errors.push(ConfigError::new(
                format!("{here}.name"),
                format!("exemption {:?} is defined twice", e.name),
            ));
        }
    }
}

/// What the exemptions say about one request.
#[derive(Debug, Default)]
pub(crate) struct ExemptionCheck<'e> {
    /// The first exemption that applies: the request is left alone.
    pub(crate) exempt_by: Option<&'e Exemption>,
    /// Why exemptions whose labels the object carries did not apply (warnings, and context
    /// for a denial).
    pub(crate) not_applied: Vec<String>,
}

/// Judges `exemptions` for a request from `who` about `object` (a `kind`).
pub(crate) fn check_request<'e>(
    exemptions: &'e [Exemption],
    who: &Requester<'_>,
    kind: WorkloadKind,
    object: &Value,
) -> ExemptionCheck<'e> {
    let mut out = ExemptionCheck::default();
    for e in exemptions {
        match e.fit(who, kind, object) {
            Fit::Applies => {
                out.exempt_by = Some(e);
                out.not_applied.clear();
                return out;
            }
            Fit::LabelsOnly(why) => out.not_applied.push(why),
            Fit::Unrelated => {}
        }
    }
    out
}

/// The annotation launchgate's mutating webhook writes on a workload an exemption covers (on
/// the object and on each of its pod templates, so the pods and child workloads its controller
/// makes carry it): the exemption's name. It is trusted only on an object its owner's
/// controller verifiably sent (`match.podCreators` and the owner's mark), and only while that
/// exemption is configured and covers the namespace; launchgate removes it from (and denies)
/// any other object that carries it without having been given it.
pub const EXEMPTED_BY_ANNOTATION: &str = "launchgate.io/exempted-by";

/// Where the exemption mark of `object` (a `kind`) is: `metadata` of the object and of each pod
/// template (by the template's dotted path), with the value found there (if any).
fn mark_places(kind: WorkloadKind, object: &Value) -> Vec<(String, Option<&str>)> {
    let Some(obj) = object.as_object() else {
        return Vec::new();
    };
    let mut out = vec![(
        "metadata".to_string(),
        workload::annotation(obj, EXEMPTED_BY_ANNOTATION),
    )];
    for (info, template) in workload::templates(kind, object) {
        if info.path_text.is_empty() {
            continue; // a Pod: its template is itself
        }
        out.push((
            format!("{}.metadata", info.path_text),
            workload::annotation(template, EXEMPTED_BY_ANNOTATION),
        ));
    }
    out
}

/// The exemption `object` (a `kind`) is marked with: the first of its marks (on itself, then
/// its pod templates), if it carries one.
pub(crate) fn mark_of(kind: WorkloadKind, object: &Value) -> Option<&str> {
    mark_places(kind, object).into_iter().find_map(|(_, v)| v)
}

/// The places of `object` that carry the exemption mark but did not carry the same value in
/// `old` (the object before an UPDATE; `None` on CREATE): marks launchgate did not write.
pub(crate) fn unearned_marks(
    kind: WorkloadKind,
    object: &Value,
    old: Option<&Value>,
) -> Vec<String> {
    let before = old.map(|o| mark_places(kind, o)).unwrap_or_default();
    mark_places(kind, object)
        .into_iter()
        .filter_map(|(place, value)| {
            let value = value?;
            let kept = before.iter().any(|(p, v)| *p == place && *v == Some(value));
            (!kept).then(|| format!("{place}.annotations"))
        })
        .collect()
}

/// Calls `f` on each place of `object` that carries the exemption mark, the places
/// [`mark_places`] reads: each pod template (a Pod is its own), then the object; true when any
/// call changed something.
fn edit_mark_places(
    kind: WorkloadKind,
    object: &mut Node<'_, Value>,
    mut f: impl FnMut(&mut MapNode<'_>) -> bool,
) -> bool {
    let mut changed = false;
    if kind.is_job() {
        workload::for_each_template_mut(kind, object, |_, template| changed |= f(template));
    }
    if let Some(mut obj) = object.as_map_node() {
        changed |= f(&mut obj);
    }
    changed
}

/// Writes the exemption mark `name` on `object` and on each of its pod templates; true when
/// something changed.
pub(crate) fn write_marks(kind: WorkloadKind, object: &mut Node<'_, Value>, name: &str) -> bool {
    edit_mark_places(kind, object, |map| {
        workload::set_annotation(map, EXEMPTED_BY_ANNOTATION, name)
    })
}

/// Removes the exemption mark from `object` and its pod templates; true when there was one.
pub(crate) fn strip_marks(kind: WorkloadKind, object: &mut Node<'_, Value>) -> bool {
    edit_mark_places(kind, object, remove_mark)
}

/// Removes the exemption mark from the object's own metadata (not its pod templates, which an
/// UPDATE may not rewrite); true when there was one.
pub(crate) fn strip_own_mark(object: &mut Node<'_, Value>) -> bool {
    object
        .as_map_node()
        .is_some_and(|mut obj| remove_mark(&mut obj))
}

/// Removes the exemption mark from the annotations of `map` (an object or a pod template).
fn remove_mark(map: &mut MapNode<'_>) -> bool {
    map.at_steps(&[Step::Key("metadata"), Step::Key("annotations")])
        .is_some_and(|mut annotations| {
            annotations
                .as_map_node()
                .is_some_and(|mut annotations| annotations.remove(EXEMPTED_BY_ANNOTATION))
        })
}

/// The exemption a pod or child workload inherits from its owner: the one named by the mark it
/// carries (its own, or its pod templates'), looked up in `lists` (the global exemptions, then
/// its queue's), when that exemption still covers `namespace`. Only for an object whose owner
/// claim is verified: the caller checks that.
pub(crate) fn inherited<'e>(
    lists: &[&'e [Exemption]],
    kind: WorkloadKind,
    object: &Value,
    namespace: &str,
) -> Option<&'e Exemption> {
    let places = mark_places(kind, object);
    let mut names = places.iter().filter_map(|(_, v)| *v);
    let name = names.next()?;
    // Marks that disagree were not all written by launchgate for one exemption.
    if !names.all(|n| n == name) {
        return None;
    }
    lists
        .iter()
        .flat_map(|l| l.iter())
        .find(|e| e.name == name && e.covers_namespace(namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn image_builds() -> Exemption {
        Exemption {
            name: "wandb-image-builds".into(),
            service_accounts: vec!["wandb/wandb-launch-serviceaccount-*".into()],
            labels: BTreeMap::from([("wandb".into(), "launch".into())]),
            images: vec!["gcr.io/kaniko-project/executor:*".into()],
            ..Exemption::default()
        }
    }

    /// A kaniko build pod as the W&B agent makes it.
    fn kaniko_pod() -> Value {
        json!({"metadata": {"labels": {"wandb": "launch"}},
            "spec": {"containers": [{"name": "wandb-container-build",
                "image": "gcr.io/kaniko-project/executor:v1.23.2",
                "args": ["--context=s3://b/ctx.tgz", "--dockerfile=Dockerfile",
                    "--destination=registry/img:tag"]}]}})
    }

    fn who<'a>(username: &'a str, groups: &'a [Value], namespace: &'a str) -> Requester<'a> {
        Requester {
            username,
            groups,
            namespace,
        }
    }

    #[test]
    fn a_label_exempts_only_together_with_its_requester() {
        let e = [image_builds()];
        let labelled = kaniko_pod();
        let agent = "system:serviceaccount:wandb:wandb-launch-serviceaccount-prod";
        let found = check_request(&e, &who(agent, &[], "wandb"), WorkloadKind::Pod, &labelled);
        assert_eq!(
            found.exempt_by.map(|e| e.name.as_str()),
            Some("wandb-image-builds")
        );

        let found = check_request(
            &e,
            &who("alice", &[], "team-a"),
            WorkloadKind::Pod,
            &labelled,
        );
        assert!(found.exempt_by.is_none());
        let [why] = &found.not_applied[..] else {
            panic!("{:?}", found.not_applied)
        };
        assert!(why.contains(r#""wandb-image-builds""#), "{why}");
        assert!(why.contains(r#"user "alice""#), "{why}");
        assert!(why.contains("wandb/wandb-launch-serviceaccount-*"), "{why}");

        // Another service account, even in the agent's namespace, is not the agent.
        let other = "system:serviceaccount:wandb:default";
        assert!(
            check_request(&e, &who(other, &[], "wandb"), WorkloadKind::Pod, &labelled)
                .exempt_by
                .is_none()
        );
        // The agent creating an object without the label: not an image build.
        let plain = json!({"metadata": {"labels": {"wandb.ai/monitor": "true"}}});
        let found = check_request(&e, &who(agent, &[], "wandb"), WorkloadKind::Pod, &plain);
        assert!(found.exempt_by.is_none() && found.not_applied.is_empty());
    }

    /// A batch/v1 Job as the W&B agent creates it: `labels` on the Job, `template_labels` on its
    /// pod template, one container.
    fn agent_job(labels: Value, template_labels: Value, container: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "labels": labels},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": template_labels},
                "spec": {"restartPolicy": "Never", "containers": [container]}}}})
    }

    #[test]
    fn the_image_build_exemption_covers_a_kaniko_build_and_nothing_else() {
        let agent = "system:serviceaccount:wandb:wandb-launch-serviceaccount-prod";
        let build = json!({"name": "wandb-container-build",
            "image": "gcr.io/kaniko-project/executor:v1.8.0",
            "args": ["--context=s3://b/ctx.tgz", "--dockerfile=Dockerfile",
                "--destination=registry/img:tag"]});
        let training = json!({"name": "train", "image": "ghcr.io/acme/train:1",
            "command": ["torchrun", "train.py"],
            "resources": {"limits": {"nvidia.com/gpu": 8}}});
        let launch = json!({"wandb": "launch"});
        let monitored = json!({"wandb.ai/monitor": "true", "wandb": "launch"});
        let mut shell = build.clone();
        shell["command"] = json!(["/busybox/sh", "-c", "python train.py"]);
        // The example policy and the built-in defaults say the same.
        let example = crate::policy::Policy::embedded_default();
        for exemptions in [
            &example.config.match_rules.exemptions,
            &crate::policy::MatchRules::default().exemptions,
        ] {
            let exempt = |job: &Value| {
                check_request(
                    exemptions,
                    &who(agent, &[], "wandb"),
                    WorkloadKind::BatchJob,
                    job,
                )
                .exempt_by
                .is_some()
            };
            // The image build the agent makes: the Job's own label, the kaniko executor.
            assert!(exempt(&agent_job(
                launch.clone(),
                launch.clone(),
                build.clone()
            )));
            // A training run whose pod template carries the label is no image build.
            assert!(!exempt(&agent_job(
                json!({}),
                monitored.clone(),
                training.clone()
            )));
            // Nor one that carries it on the Job too: its container is no kaniko executor.
            let run = agent_job(launch.clone(), monitored.clone(), training.clone());
            assert!(!exempt(&run));
            let found = check_request(
                exemptions,
                &who(agent, &[], "wandb"),
                WorkloadKind::BatchJob,
                &run,
            );
            assert!(
                found.not_applied[0]
                    .contains(r#"container "train" runs image "ghcr.io/acme/train:1""#),
                "{:?}",
                found.not_applied
            );
            // The kaniko image with its entrypoint replaced runs anything.
            assert!(!exempt(&agent_job(
                launch.clone(),
                launch.clone(),
                shell.clone()
            )));
            // A build next to a training container is not only a build.
            let mut both = agent_job(launch.clone(), launch.clone(), build.clone());
            both["spec"]["template"]["spec"]["initContainers"] = json!([training.clone()]);
            assert!(!exempt(&both));
        }
    }

    #[test]
    fn users_groups_and_namespaces_are_matched() {
        let e = [Exemption {
            name: "platform".into(),
            groups: vec!["platform-admins".into()],
            namespaces: vec!["ops-*".into()],
            ..Exemption::default()
        }];
        let groups = [json!("system:authenticated"), json!("platform-admins")];
        let none = json!({});
        assert!(
            check_request(
                &e,
                &who("bob", &groups, "ops-tools"),
                WorkloadKind::Pod,
                &none
            )
            .exempt_by
            .is_some()
        );
        assert!(
            check_request(&e, &who("bob", &groups, "team-a"), WorkloadKind::Pod, &none)
                .exempt_by
                .is_none()
        );
        assert!(
            check_request(&e, &who("bob", &[], "ops-tools"), WorkloadKind::Pod, &none)
                .exempt_by
                .is_none()
        );
    }

    #[test]
    fn unsafe_exemptions_are_config_errors() {
        let errors = |e: Exemption| {
            let mut errors = Vec::new();
            check_all(&[e], "match.exemptions", &mut errors);
            errors.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        let label_only = Exemption {
            name: "builds".into(),
            labels: BTreeMap::from([("wandb".into(), "launch".into())]),
            namespaces: vec!["wandb".into()],
            ..Exemption::default()
        };
        let e = errors(label_only);
        assert!(
            e.iter()
                .any(|e| e.starts_with("match.exemptions[0].labels: a label exemption also needs")),
            "{e:?}"
        );
        let empty = errors(Exemption {
            name: "x".into(),
            ..Exemption::default()
        });
        assert!(empty[0].contains("would exempt every request"), "{empty:?}");
        let everyone = errors(Exemption {
            name: "x".into(),
            groups: vec!["system:authenticated".into()],
            users: vec!["*".into()],
            service_accounts: vec!["*/*".into(), "default".into()],
            ..Exemption::default()
        });
        assert_eq!(everyone.len(), 4, "{everyone:?}");
        assert!(
            everyone
                .iter()
                .any(|e| e.contains("serviceAccounts[1]") && e.contains("namespace/name"))
        );
        assert!(errors(image_builds()).is_empty());
        let mut twice = Vec::new();
        check_all(&[image_builds(), image_builds()], "m", &mut twice);
        assert!(twice[0].to_string().contains("defined twice"), "{twice:?}");
    }

    #[test]
    fn every_pattern_that_covers_everyone_is_a_config_error() {
        let errors = |users: &[&str], groups: &[&str], service_accounts: &[&str]| {
            let mut errors = Vec::new();
            let e = Exemption {
                name: "x".into(),
                users: users.iter().map(ToString::to_string).collect(),
                groups: groups.iter().map(ToString::to_string).collect(),
                service_accounts: service_accounts.iter().map(ToString::to_string).collect(),
                ..Exemption::default()
            };
            check_all(&[e], "m", &mut errors);
            errors.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        for user in [
            "*",
            "?*",
            "*?",
            "**",
            "*:*",
            "system:serviceaccount:*",
            "system:*",
        ] {
            let e = errors(&[user], &[], &[]);
            assert!(
                matches!(&e[..], [one] if one.starts_with("m[0].users[0]:") && one.contains("every")),
                "{user}: {e:?}"
            );
        }
        for group in [
            "system:authenticated",
            "system:unauthenticated",
            "system:serviceaccounts",
            "system:serviceaccounts:*",
            "system:serviceaccounts*",
            "system:*",
            "?*",
        ] {
            let e = errors(&[], &[group], &[]);
            assert!(
                matches!(&e[..], [one] if one.starts_with("m[0].groups[0]:") && one.contains("every")),
                "{group}: {e:?}"
            );
        }
        for sa in ["*/*", "?*/*", "*/?*"] {
            let e = errors(&[], &[], &[sa]);
            assert!(
                matches!(&e[..], [one] if one.contains("every service account")),
                "{sa}: {e:?}"
            );
        }
        // Someone in particular is fine.
        assert!(
            errors(
                &["alice", "system:serviceaccount:ci:*", "oidc:*@acme.com"],
                &["platform-admins", "system:serviceaccounts:ci", "team-*"],
                &["wandb/wandb-launch-serviceaccount-*", "ci/*"],
            )
            .is_empty()
        );
    }

    #[test]
    fn a_request_without_user_is_no_service_account() {
        let e = [image_builds()];
        let found = check_request(&e, &who("", &[], ""), WorkloadKind::Pod, &kaniko_pod());
        assert!(found.exempt_by.is_none());
        assert!(found.not_applied[0].contains("an unidentified requester"));
    }
}
