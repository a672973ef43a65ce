//! The rule table: every denial launchgate makes is one [`Rule`] here — a queue limit, a launch
//! guardrail, the PyTorch wiring's `onUnwirable: deny`, the Kueue labels, and the few denials of
//! launchgate's own (an unverifiable TrainJob runtime, a forged exemption mark, an unjudgeable
//! Scale, an object too dense or too slow to review).
//!
//! A check reports a [`Violation`] naming its rule; metrics
//! (`launchgate_violations_total{rule}`), Kubernetes Events, the decision log, the audit's
//! reports and the playground read the rule id from it, never from the message text. The native
//! compiler prints a rule's [`Native::WebhookOnly`] reason in `compile-native --report`, and
//! [`reference`] lists the table for the generated reference page.
//!
//! The table is data at the bottom of the crate (it imports nothing), so the paths that check
//! (`validate`, `review`), the native compiler and the shells all read the same entries.

use serde::Serialize;

/// How the native admission policies (`compile-native`) carry a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase", tag = "form", content = "text")]
pub enum Native {
    /// Compiled to CEL: where the expression comes from.
    Cel(&'static str),
    /// Not compiled: why it stays in the webhook (printed by `compile-native --report`).
    WebhookOnly(&'static str),
}

impl Native {
    /// Why the rule stays in the webhook, when it does.
    pub fn reason(self) -> Option<&'static str> {
        match self {
            Native::Cel(_) => None,
            Native::WebhookOnly(why) => Some(why),
        }
    }
}

/// One rule: a kind of denial, with where it is configured and what to do about it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// Stable id, config-key-like (`limits.variables`): the `rule` label of
    /// `launchgate_violations_total`, the `rule` of a report result.
    pub id: &'static str,
    /// Where it is configured (`queues.<queue>.limits.variables`), or what sets it.
    pub config_key: &'static str,
    /// What a violation means.
    pub meaning: &'static str,
    /// What to do about one.
    pub action: &'static str,
    /// Its CEL form, or why it has none.
    pub native: Native,
    /// How an UPDATE is judged by it.
    pub update: OnUpdate,
}

/// How a rule judges an UPDATE. Whatever the rule, an UPDATE that brings an object into a
/// queue (it was no launch workload, or another queue's) was never judged there: it is judged
/// as a CREATE, by every rule, with nothing carried over from the old object. Otherwise the old
/// object is what launchgate admitted in this queue (judged, or exempted), and the rule refuses
/// the UPDATE only as its variant says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum OnUpdate {
    /// Refused only if what the rule judges grew beyond what was admitted: a violation the old
    /// object had at the same place against the same bound, with the same or a larger value
    /// (amounts compared as quantities), is carried with a warning.
    Grown,
    /// Refused only for a violation the old object did not have (same place, bound and value):
    /// what was admitted is carried with a warning.
    Changed,
    /// Judged on CREATE only (and on an UPDATE that brings the object into the queue): an
    /// UPDATE of what was admitted cannot break it.
    CreateOnly,
    /// Judged on every request alike: nothing an UPDATE keeps.
    Every,
}

impl OnUpdate {
    /// How the rule judges an UPDATE, in a sentence (the rule reference shows it).
    pub fn describe(self) -> &'static str {
        match self {
            OnUpdate::Grown => {
                "refused only if the value grew beyond the old object's at the same place and bound (a violation already admitted, or smaller now, passes with a warning); an UPDATE that brings the object into the queue is judged as a CREATE"
            }
            OnUpdate::Changed => {
                "refused only for a violation the old object did not have (the same place, bound and value passes with a warning); an UPDATE that brings the object into the queue is judged as a CREATE"
            }
            OnUpdate::CreateOnly => {
                "judged on CREATE and on an UPDATE that brings the object into the queue; not on other UPDATEs"
            }
            OnUpdate::Every => "judged on every request alike",
        }
    }
}

/// `queues.<queue>.limits.allowedNamespaces`.
pub const LIMITS_ALLOWED_NAMESPACES: &Rule = &Rule {
    id: "limits.allowedNamespaces",
    config_key: "queues.<queue>.limits.allowedNamespaces",
    meaning: "the workload is in a namespace the queue does not allow",
    action: "submit to a listed namespace, or use another queue",
    native: Native::Cel("the namespace compared with the list (validate::native)"),
    update: OnUpdate::Changed,
};

/// `queues.<queue>.limits.variables` (and the envelope they set on every container).
pub const LIMITS_VARIABLES: &Rule = &Rule {
    id: "limits.variables",
    config_key: "queues.<queue>.limits.variables",
    meaning: "a value at a template variable's position is outside the variable's schema (type, minimum, maximum, enum, required, the template's pattern around it); a container the template does not describe is held to the largest maximum any container may have (the envelope)",
    action: "bring the value within the bound the message names, or the queue's platform team changes the variable",
    native: Native::Cel(
        "each position of the variable, bound to the workload's pod templates and containers by role and name (validate::native); a position CEL cannot place is listed in the report",
    ),
    update: OnUpdate::Changed,
};

/// `queues.<queue>.limits.fields`.
pub const LIMITS_FIELDS: &Rule = &Rule {
    id: "limits.fields",
    config_key: "queues.<queue>.limits.fields",
    meaning: "a value at a field limit's path is outside its schema (or missing where required); a container no limit describes is held to the largest maximum (the envelope)",
    action: "bring the value within the bound the message names",
    native: Native::Cel("each field path under the root or every pod template (validate::native)"),
    update: OnUpdate::Changed,
};

/// `queues.<queue>.limits.strict`.
pub const LIMITS_STRICT: &Rule = &Rule {
    id: "limits.strict",
    config_key: "queues.<queue>.limits.strict",
    meaning: "`strict: true`: a fixed (non-variable) value of the queue template differs on the workload",
    action: "use the template's value",
    native: Native::WebhookOnly(
        "the template's fixed values compare by JSON value and by `${macro}` pattern",
    ),
    update: OnUpdate::Changed,
};

/// `queues.<queue>.limits.totals`.
pub const LIMITS_TOTALS: &Rule = &Rule {
    id: "limits.totals",
    config_key: "queues.<queue>.limits.totals",
    meaning: "the pods that can run at once × each pod's amount of a resource is over the queue's total (a TrainJob counted as the JobSet Trainer makes from its runtime)",
    action: "fewer replicas or parallelism, or less per pod; the message's parts show which template counts how much",
    native: Native::Cel(
        "the sum over the kind's pod templates of pods at once × per-pod amount (validate::native)",
    ),
    update: OnUpdate::Grown,
};

/// `queues.<queue>.limits.maxActiveDeadlineSeconds`.
pub const LIMITS_MAX_ACTIVE_DEADLINE_SECONDS: &Rule = &Rule {
    id: "limits.maxActiveDeadlineSeconds",
    config_key: "queues.<queue>.limits.maxActiveDeadlineSeconds",
    meaning: "the workload has no activeDeadlineSeconds (on itself or on every pod template), or one over the queue's maximum",
    action: "set a deadline within the bound",
    native: Native::Cel(
        "the run-level and pod-template deadlines compared with the maximum (validate::native)",
    ),
    update: OnUpdate::Grown,
};

/// `queues.<queue>.limits.allowedRegistries`.
pub const LIMITS_ALLOWED_REGISTRIES: &Rule = &Rule {
    id: "limits.allowedRegistries",
    config_key: "queues.<queue>.limits.allowedRegistries",
    meaning: "a container image (of any container list, ephemeral containers included) is not under an allowed registry prefix",
    action: "use an image from a listed registry",
    native: Native::Cel("every image, normalised, against the prefixes (validate::native)"),
    update: OnUpdate::Changed,
};

/// `queues.<queue>.limits.unverifiableRuntime`.
pub const LIMITS_UNVERIFIABLE_RUNTIME: &Rule = &Rule {
    id: "limits.unverifiableRuntime",
    config_key: "queues.<queue>.limits.unverifiableRuntime",
    meaning: "a TrainJob leaves numNodes or resourcesPerNode to a runtime launchgate cannot read, in a queue whose totals or GPU-hour ceiling bound its size (`deny`, the default; `warn` makes it a warning)",
    action: "set spec.trainer.numNodes and resourcesPerNode on the TrainJob, or turn on cluster lookups so the runtime is read",
    native: Native::WebhookOnly(
        "a TrainJob's pods come from its training runtime, read from the cluster; native policies do not judge TrainJobs",
    ),
    update: OnUpdate::CreateOnly,
};

/// `queues.<queue>.limits.trainingRuntimes`.
pub const LIMITS_TRAINING_RUNTIMES: &Rule = &Rule {
    id: "limits.trainingRuntimes",
    config_key: "queues.<queue>.limits.trainingRuntimes",
    meaning: "`trainingRuntimes: clusterOnly` (the default): a TrainJob names a namespaced TrainingRuntime, which a tenant can own and grow after the TrainJob is admitted; only ClusterTrainingRuntimes size the queue's runs",
    action: "name a ClusterTrainingRuntime, or the platform team sets `trainingRuntimes: namespaced` for the queue",
    native: Native::WebhookOnly(
        "a TrainJob's pods come from its training runtime, read from the cluster; native policies do not judge TrainJobs",
    ),
    update: OnUpdate::Changed,
};

/// `queues.<queue>.kueue`: the Kueue labels are the queue's.
pub const KUEUE_LABELS: &Rule = &Rule {
    id: "kueue.labels",
    config_key: "queues.<queue>.kueue",
    meaning: "the workload's Kueue label (LocalQueue, priority class, longest run time) differs from the queue's after the mutating webhook, or an update changed it",
    action: "remove the label (launchgate writes the queue's at creation) or set the queue's value; a shorter run time is fine",
    native: Native::Cel("the labels compared with the queue's (native::kueue)"),
    update: OnUpdate::Changed,
};

/// `queues.<queue>.guardrails.gang: deny`.
pub const GUARDRAILS_GANG: &Rule = &Rule {
    id: "guardrails.gang",
    config_key: "queues.<queue>.guardrails.gang",
    meaning: "`gang: deny`: a gang scheduler's minimum (a Volcano Job's spec.minAvailable, a PyTorchJob's runPolicy.schedulingPolicy.minAvailable) is below the job's rendezvous size, so the job could start half",
    action: "set the minimum to the rendezvous size the message names",
    native: Native::WebhookOnly(
        "the rendezvous size comes from the topology reading the wiring uses",
    ),
    update: OnUpdate::Changed,
};

/// `queues.<queue>.guardrails.costCeiling.maxGpuHours`.
pub const GUARDRAILS_COST_CEILING: &Rule = &Rule {
    id: "guardrails.costCeiling",
    config_key: "queues.<queue>.guardrails.costCeiling.maxGpuHours",
    meaning: "GPUs at once × the run's bound (its run-level deadline × runs) is over the queue's GPU-hours per run, or the run has no run-level bound (`enforcement: deny`; `warn` makes it a warning)",
    action: "set the field the message names to at most the value it gives, allow fewer restarts, or use fewer GPUs",
    native: Native::WebhookOnly(
        "GPU-hours multiply the topology's GPUs at once by the run's bound (its run-level deadline, or a JobSet's Job deadlines × (failurePolicy.maxRestarts + 1), a Volcano Job's pod deadlines × (maxRetry + 1)), with the deadline the mutation may have written; this stays in the webhook",
    ),
    update: OnUpdate::Grown,
};

/// `queues.<queue>.pytorch.onUnwirable: deny`.
pub const PYTORCH_ON_UNWIRABLE: &Rule = &Rule {
    id: "pytorch.onUnwirable",
    config_key: "queues.<queue>.pytorch.onUnwirable",
    meaning: "a distributed PyTorch job launchgate would wire can never rendezvous (no master, several masters, no subdomain, parallelism below completions, …) and the queue says `onUnwirable: deny`",
    action: "fix the shape the message names, or opt the job out with the label launchgate.io/pytorch: \"false\"",
    native: Native::WebhookOnly(
        "the distributed wiring reads the whole topology (master, ranks, world size) and, for controller-made pods, their workload (cluster lookups)",
    ),
    update: OnUpdate::CreateOnly,
};

/// A workload carrying an exemption mark launchgate did not write.
pub const EXEMPTIONS_UNEARNED_MARK: &Rule = &Rule {
    id: "exemptions.unearnedMark",
    config_key: "match.exemptions, queues.<queue>.exemptions",
    meaning: "the workload (or a pod template) carries launchgate.io/exempted-by, which only launchgate writes on a workload an exemption covers, and no exemption covers this one",
    action: "remove the annotation; exemptions go by requester and namespace",
    native: Native::Cel(
        "a mark on a workload that is not a verified controller's child, refused on CREATE and on an UPDATE that labels the workload into the queue, where an exemption is configured (native::select::unproven_marks): nothing in the native policies writes one",
    ),
    update: OnUpdate::Changed,
};

/// A PyTorchJob Scale whose PyTorchJob cannot be read.
pub const SCALE_UNREADABLE_OWNER: &Rule = &Rule {
    id: "scale.unreadableOwner",
    config_key: "clusterLookups (serve --cluster-lookups)",
    meaning: "a scale-up through pytorchjobs/scale, whose PyTorchJob launchgate cannot read (no cluster lookups, or not in their cache yet), so its queue's limits cannot be checked",
    action: "turn on cluster lookups (covering the namespace) and retry, or change spec.pytorchReplicaSpecs.Worker.replicas on the PyTorchJob",
    native: Native::WebhookOnly(
        "a Scale carries no labels: its queue is its PyTorchJob's, read from the cluster",
    ),
    update: OnUpdate::Grown,
};

/// A request whose object would need more memory than the server's whole budget.
pub const SERVER_TOO_DENSE: &Rule = &Rule {
    id: "server.tooDense",
    config_key: "--memory-budget-mib (the pod's memory limit)",
    meaning: "the object's shape alone (tens of thousands of containers) would need more memory to review than the replica's whole budget: denied unreviewed",
    action: "split the workload, or raise the webhook's memory limit (the budget follows it)",
    native: Native::WebhookOnly(
        "a memory budget is the webhook's; the API server bounds a policy's CEL cost itself",
    ),
    update: OnUpdate::Every,
};

/// A request whose object would take longer to review than the request deadline allows.
pub const SERVER_TOO_SLOW: &Rule = &Rule {
    id: "server.tooSlow",
    config_key: "--request-deadline-ms",
    meaning: "the object's shape alone (tens of thousands of containers) would take longer to review than half the request deadline, so the answer would come after the API server gave up: denied unreviewed",
    action: "split the workload, or raise the request deadline and the webhook's timeoutSeconds together",
    native: Native::WebhookOnly(
        "a request deadline is the webhook's; the API server bounds a policy's CEL cost itself",
    ),
    update: OnUpdate::Every,
};

/// Every rule, in the order the reference lists them.
pub const RULES: &[&Rule] = &[
    LIMITS_ALLOWED_NAMESPACES,
    LIMITS_VARIABLES,
    LIMITS_FIELDS,
    LIMITS_STRICT,
    LIMITS_TOTALS,
    LIMITS_MAX_ACTIVE_DEADLINE_SECONDS,
    LIMITS_ALLOWED_REGISTRIES,
    LIMITS_UNVERIFIABLE_RUNTIME,
    LIMITS_TRAINING_RUNTIMES,
    KUEUE_LABELS,
    GUARDRAILS_GANG,
    GUARDRAILS_COST_CEILING,
    PYTORCH_ON_UNWIRABLE,
    EXEMPTIONS_UNEARNED_MARK,
    SCALE_UNREADABLE_OWNER,
    SERVER_TOO_DENSE,
    SERVER_TOO_SLOW,
];

/// The rule with `id`.
pub fn by_id(id: &str) -> Option<&'static Rule> {
    RULES.iter().copied().find(|r| r.id == id)
}

/// One row of the rule reference, ready to render (a Markdown table row, a JSON entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleReference {
    /// The rule id.
    pub id: &'static str,
    /// Where it is configured.
    pub config_key: &'static str,
    /// What a violation means.
    pub meaning: &'static str,
    /// What to do.
    pub action: &'static str,
    /// True when `compile-native` compiles it to CEL.
    pub native: bool,
    /// The CEL form's source, or why the rule stays in the webhook.
    pub native_note: &'static str,
    /// How an UPDATE is judged.
    pub update: &'static str,
}

/// The table, one row per rule in [`RULES`] order: what a generated reference page renders.
pub fn reference() -> Vec<RuleReference> {
    RULES
        .iter()
        .map(|r| {
            let (native, native_note) = match r.native {
                Native::Cel(how) => (true, how),
                Native::WebhookOnly(why) => (false, why),
            };
            RuleReference {
                id: r.id,
                config_key: r.config_key,
                meaning: r.meaning,
                action: r.action,
                native,
                native_note,
                update: r.update.describe(),
            }
        })
        .collect()
}

/// What answers a violation: the queue's enforcement of the rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// The request is denied.
    #[default]
    Deny,
    /// Allowed, with the violation as a warning.
    Warn,
    /// Allowed silently; logged, counted and recorded in the audit annotation.
    Audit,
}

impl Effect {
    /// `deny`, `warn`, `audit` (the `enforcement` label).
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Deny => "deny",
            Effect::Warn => "warn",
            Effect::Audit => "audit",
        }
    }
}

/// One violation of one rule: what a check returns.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Violation {
    /// The rule broken.
    #[serde(serialize_with = "serialize_rule")]
    pub rule: &'static Rule,
    /// The config entry within the rule: a variable's name, a field limit's path, a resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Where in the object (`spec.template.spec.containers[0].image`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The value found there, as the message shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The bound broken, as the message words it (`exceeds maximum 4`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// The message shown to the user.
    pub message: String,
    /// How the queue answers it.
    pub effect: Effect,
}

fn serialize_rule<S: serde::Serializer>(rule: &&'static Rule, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(rule.id)
}

impl Violation {
    /// A violation of `rule` with `message` (denying).
    pub fn new(rule: &'static Rule, message: impl Into<String>) -> Self {
        debug_assert!(
            by_id(rule.id).is_some_and(|r| r == rule),
            "rule {} is not in rules::RULES",
            rule.id
        );
        Violation {
            rule,
            key: None,
            path: None,
            value: None,
            limit: None,
            message: message.into(),
            effect: Effect::Deny,
        }
    }

    /// With the config entry within the rule.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// With the place in the object.
    pub fn at(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// With the value found.
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// With the bound broken.
    pub fn limit(mut self, limit: impl Into<String>) -> Self {
        self.limit = Some(limit.into());
        self
    }

    /// Answered with `effect`.
    pub fn effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self
    }

    /// The message with a prefix (`queue "q": `).
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.message.insert_str(0, prefix);
        self
    }
}

/// The distinct rule ids of `violations`, in first-seen order.
pub fn ids<'a>(violations: impl IntoIterator<Item = &'a Violation>) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for v in violations {
        if !out.contains(&v.rule.id) {
            out.push(v.rule.id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_config_like_and_documented() {
        let mut seen = std::collections::BTreeSet::new();
        for r in RULES {
            assert!(seen.insert(r.id), "{} twice", r.id);
            let (area, name) = r.id.split_once('.').expect("area.name");
            assert!(
                [area, name]
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric())),
                "{}",
                r.id
            );
            assert!(!r.config_key.is_empty() && !r.meaning.is_empty() && !r.action.is_empty());
            match r.native {
                Native::Cel(t) | Native::WebhookOnly(t) => assert!(!t.is_empty(), "{}", r.id),
            }
        }
    }

    #[test]
    fn the_reference_has_one_row_per_rule_with_its_native_reason() {
        let rows = reference();
        assert_eq!(rows.len(), RULES.len());
        let strict = rows.iter().find(|r| r.id == "limits.strict").unwrap();
        assert!(!strict.native);
        assert_eq!(Some(strict.native_note), LIMITS_STRICT.native.reason());
        let json = serde_json::to_value(&rows).unwrap();
        assert_eq!(
            json[0]["configKey"],
            "queues.<queue>.limits.allowedNamespaces"
        );
    }

    #[test]
    fn a_violation_serialises_its_rule_by_id() {
        let v = Violation::new(LIMITS_VARIABLES, "x")
            .key("gpus")
            .at("spec.x")
            .value("8")
            .limit("exceeds maximum 4")
            .effect(Effect::Warn);
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["rule"], "limits.variables");
        assert_eq!(json["key"], "gpus");
        assert_eq!(json["effect"], "warn");
        assert_eq!(ids([&v, &v]), ["limits.variables"]);
        assert_eq!(by_id("guardrails.gang"), Some(GUARDRAILS_GANG));
        assert_eq!(by_id("variable:gpus"), None);
    }
}
