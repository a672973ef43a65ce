//! Exemptions: which requests launchgate leaves alone.
//!
//! A label is not an identity: whoever creates an object writes its labels. An exemption is
//! therefore decided by the request — who sends it (`userInfo`: users, groups, service
//! accounts) and where (its namespace) — and labels only narrow it further, the way
//! Gatekeeper's exempt users and Kyverno's PolicyExceptions are written.

use crate::admission::AdmissionRequest;
use crate::error::ConfigError;
use crate::workload;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
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
fn user_pattern_covers_everyone(pattern: &str) -> Option<&'static str> {
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
    } else if p.matches(EVERY_SERVICE_ACCOUNT_GROUP) || matches_all(pattern, &SERVICE_ACCOUNT_GROUP_PROBES) {
        Some("every service account")
    } else {
        None
    }
}

/// One exemption: requests it covers are allowed untouched (no mutation, no limit).
///
/// It applies when the request comes from one of its `users`, `groups` or `serviceAccounts`
/// (when any is set), in one of its `namespaces` (when set), for an object that carries all of
/// its `labels` (when set). A label exemption needs a requester condition.
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
    /// Labels (with these values) that the object, or one of its pod templates, must carry
    /// too. Only together with `users`, `groups` or `serviceAccounts`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
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
pub(super) fn any_match(patterns: &[String], value: &str) -> bool {
    patterns.iter().any(|p| WildMatch::new(p).matches(value))
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

    fn requester_fits(&self, who: &Requester<'_>) -> bool {
        !self.has_requester()
            || any_match(&self.users, who.username)
            || who.groups().any(|g| any_match(&self.groups, g))
            || who
                .service_account()
                .is_some_and(|sa| any_match(&self.service_accounts, &sa))
    }

    fn labels_fit(&self, carriers: &[&Map<String, Value>]) -> bool {
        self.labels.is_empty()
            || carriers.iter().any(|c| {
                self.labels
                    .iter()
                    .all(|(k, v)| workload::label(c, k) == Some(v.as_str()))
            })
    }

    fn fit(&self, who: &Requester<'_>, carriers: &[&Map<String, Value>]) -> Fit {
        let labels = self.labels_fit(carriers);
        let requester = self.requester_fits(who);
        let place = self.namespaces.is_empty() || any_match(&self.namespaces, who.namespace);
        if labels && requester && place {
            return Fit::Applies;
        }
        if !labels || self.labels.is_empty() {
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

/// Judges `exemptions` for a request from `who` about an object whose labels are read from
/// `carriers` (the object and its pod templates).
pub(crate) fn check_request<'e>(
    exemptions: &'e [Exemption],
    who: &Requester<'_>,
    carriers: &[&Map<String, Value>],
) -> ExemptionCheck<'e> {
    let mut out = ExemptionCheck::default();
    for e in exemptions {
        match e.fit(who, carriers) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn image_builds() -> Exemption {
        Exemption {
            name: "wandb-image-builds".into(),
            service_accounts: vec!["wandb/wandb-launch-serviceaccount-*".into()],
            labels: BTreeMap::from([("wandb".into(), "launch".into())]),
            ..Exemption::default()
        }
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
        let labelled = json!({"metadata": {"labels": {"wandb": "launch"}}});
        let carriers = [labelled.as_object().unwrap()];
        let agent = "system:serviceaccount:wandb:wandb-launch-serviceaccount-prod";
        let found = check_request(&e, &who(agent, &[], "wandb"), &carriers);
        assert_eq!(
            found.exempt_by.map(|e| e.name.as_str()),
            Some("wandb-image-builds")
        );

        let found = check_request(&e, &who("alice", &[], "team-a"), &carriers);
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
            check_request(&e, &who(other, &[], "wandb"), &carriers)
                .exempt_by
                .is_none()
        );
        // The agent creating an object without the label: not an image build.
        let plain = json!({"metadata": {"labels": {"wandb.ai/monitor": "true"}}});
        let found = check_request(&e, &who(agent, &[], "wandb"), &[plain.as_object().unwrap()]);
        assert!(found.exempt_by.is_none() && found.not_applied.is_empty());
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
        let none: [&Map<String, Value>; 0] = [];
        assert!(
            check_request(&e, &who("bob", &groups, "ops-tools"), &none)
                .exempt_by
                .is_some()
        );
        assert!(
            check_request(&e, &who("bob", &groups, "team-a"), &none)
                .exempt_by
                .is_none()
        );
        assert!(
            check_request(&e, &who("bob", &[], "ops-tools"), &none)
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
        for user in ["*", "?*", "*?", "**", "*:*", "system:serviceaccount:*", "system:*"] {
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
        let labelled = json!({"metadata": {"labels": {"wandb": "launch"}}});
        let found = check_request(&e, &who("", &[], ""), &[labelled.as_object().unwrap()]);
        assert!(found.exempt_by.is_none());
        assert!(found.not_applied[0].contains("an unidentified requester"));
    }
}
