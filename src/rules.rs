//! The rule table: every denial launchgate makes is one [`Rule`] here — a queue limit, a launch
//! guardrail, the PyTorch wiring's `onUnwirable: deny`, the Kueue labels, and the few denials of
//! launchgate's own (an unverifiable TrainJob runtime, a forged exemption mark, an unjudgeable
//! Scale, an object too dense or too slow to review).
//!
//! A check reports a [`Violation`] naming its rule; metrics
//! (`launchgate_violations_total{rule}`), Kubernetes Events, the decision log, the audit's
//! reports and the playground read the rule id from it, never from the message text. Each rule
//! says what in a queue's settings makes it deny ([`Denies`]): the fail-closed routing reads
//! that. The native compiler prints a rule's [`Native::WebhookOnly`] reason in
//! `compile-native --report`, and `reference::rules_page` renders the table as the generated
//! reference page.
//!
//! A warning that is no rule's violation is a [`Notice`] ([`NOTICES`]): every [`Warning`]
//! carries the id of its rule or notice, counted in `launchgate_warnings_total{rule}` and listed
//! on the same page.
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
    /// What in a queue's configuration makes it deny: a queue where any rule denies is served
    /// by the fail-closed webhook (`Policy::deny_rules`).
    pub denies: Denies,
}

/// What makes a rule deny in a queue. A queue with any rule that denies is served by the
/// fail-closed validating webhook, so an outage never admits what launchgate would deny; the
/// policy reads each variant from the queue's settings (`Policy::deny_rules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Denies {
    /// `limits.enforcement: deny` (the default).
    LimitsEnforcement,
    /// `limits.enforcement: deny`, `trainingRuntimes: clusterOnly` (the default), and something
    /// bounds a run's size (`totals`, the GPU-hour ceiling).
    TrainingRuntimes,
    /// `limits.unverifiableRuntime: deny` (the default), and something bounds a run's size.
    UnverifiableRuntime,
    /// `limits.enforcement: deny` and the queue hands off to Kueue (`kueue`).
    Kueue,
    /// `limits.enforcement: deny` and no GPU by environment (`visibleDevices.enabled`, the
    /// default).
    VisibleDevices,
    /// `guardrails.gang: deny`.
    Gang,
    /// `guardrails.costCeiling.maxGpuHours` with `enforcement: deny`.
    CostCeiling,
    /// `limits.enforcement: deny` and the queue's limits bound GPUs (a most per container or a
    /// total on a whole GPU, such as `nvidia.com/gpu`).
    GpuLimits,
    /// The PyTorch wiring on, with `onUnwirable: deny`.
    PytorchUnwirable,
    /// An exemption the queue's pods could inherit (`match.exemptions`, or the queue's own):
    /// a mark naming one would exempt what inherits it. Denied whenever launchgate answers,
    /// but it alone does not make the queue fail closed ([`Denies::routes_fail_closed`]).
    Exemptions,
    /// No queue's setting: a request no queue judges (a Scale whose owner cannot be read), or
    /// the server's own bounds.
    Never,
}

impl Denies {
    /// Whether a rule that denies this way makes its queue's validating webhook fail closed.
    /// A forged exemption mark does not: a queue whose every limit only warns stays open
    /// during an outage (a warn-only rollout must never block a run), and while launchgate is
    /// down nothing it would judge is judged anyway; whenever it answers, the mark is denied.
    pub fn routes_fail_closed(self) -> bool {
        !matches!(self, Denies::Exemptions | Denies::Never)
    }
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
    /// A value over a maximum (an amount: GPUs, memory, CPUs of a container) is refused only if
    /// it grew, as [`OnUpdate::Grown`]; any other violation (a type, a minimum, an enum, a
    /// pattern, a required value) only if the old object did not have it, as
    /// [`OnUpdate::Changed`]. Which it is, the violation says ([`Violation::over_maximum`]).
    GrownOverMaximum,
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
            OnUpdate::GrownOverMaximum => {
                "a value over a maximum is refused only if it grew beyond the old object's at the same place and bound (the same or smaller passes with a warning); any other violation only if the old object did not have it (the same place, bound and value passes with a warning); an UPDATE that brings the object into the queue is judged as a CREATE"
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

/// Declares each rule as a constant, and [`RULES`]: every rule, in the order the reference lists
/// them. A rule is its id, config key, meaning, action, native form, how an UPDATE is judged and
/// what makes it deny (the fields of [`Rule`], in order).
macro_rules! rules {
    ($($(#[$doc:meta])* $name:ident = $id:literal, $config_key:literal, $meaning:literal,
        $action:literal, $native:expr, $update:expr, $denies:expr;)*) => {
        $($(#[$doc])* pub const $name: &Rule = &Rule {
            id: $id,
            config_key: $config_key,
            meaning: $meaning,
            action: $action,
            native: $native,
            update: $update,
            denies: $denies,
        };)*
        /// Every rule, in the order the reference lists them.
        pub const RULES: &[&Rule] = &[$($name),*];
    };
}

rules! {
    /// `queues.<queue>.limits.allowedNamespaces`.
    LIMITS_ALLOWED_NAMESPACES = "limits.allowedNamespaces", "queues.<queue>.limits.allowedNamespaces",
        "the workload is in a namespace the queue does not allow",
        "submit to a listed namespace, or use another queue",
        Native::Cel("the namespace compared with the list (validate::native)"),
        OnUpdate::Changed, Denies::LimitsEnforcement;
    /// `queues.<queue>.limits.variables` (and the envelope they set on every container).
    LIMITS_VARIABLES = "limits.variables", "queues.<queue>.limits.variables",
        "a value at a template variable's position is outside the variable's schema (type, minimum, maximum, enum, required, the template's pattern around it); a container the template does not describe is held to the largest maximum any container may have (the envelope)",
        "bring the value within the bound the message names, or the queue's platform team changes the variable",
        Native::Cel("each position of the variable, bound to the workload's pod templates and containers by role and name (validate::native); a position CEL cannot place is listed in the report"),
        OnUpdate::GrownOverMaximum, Denies::LimitsEnforcement;
    /// `queues.<queue>.limits.fields`.
    LIMITS_FIELDS = "limits.fields", "queues.<queue>.limits.fields",
        "a value at a field limit's path is outside its schema (or missing where required); a container no limit describes is held to the largest maximum (the envelope)",
        "bring the value within the bound the message names",
        Native::Cel("each field path under the root or every pod template (validate::native)"),
        OnUpdate::GrownOverMaximum, Denies::LimitsEnforcement;
    /// `queues.<queue>.limits.strict`.
    LIMITS_STRICT = "limits.strict", "queues.<queue>.limits.strict",
        "`strict: true`: a fixed (non-variable) value of the queue template differs on the workload",
        "use the template's value",
        Native::WebhookOnly("the template's fixed values compare by JSON value and by `${macro}` pattern"),
        OnUpdate::Changed, Denies::LimitsEnforcement;
    /// `queues.<queue>.limits.totals`.
    LIMITS_TOTALS = "limits.totals", "queues.<queue>.limits.totals",
        "the pods that can run at once × each pod's amount of a resource is over the queue's total (a TrainJob counted as the JobSet Trainer makes from its runtime)",
        "fewer replicas or parallelism, or less per pod; the message's parts show which template counts how much",
        Native::Cel("the sum over the kind's pod templates of pods at once × per-pod amount (validate::native)"),
        OnUpdate::Grown, Denies::LimitsEnforcement;
    /// `queues.<queue>.limits.maxActiveDeadlineSeconds`.
    LIMITS_MAX_ACTIVE_DEADLINE_SECONDS = "limits.maxActiveDeadlineSeconds", "queues.<queue>.limits.maxActiveDeadlineSeconds",
        "the workload has no activeDeadlineSeconds (on itself or on every pod template), or one over the queue's maximum",
        "set a deadline within the bound",
        Native::Cel("the run-level and pod-template deadlines compared with the maximum (validate::native)"),
        OnUpdate::Grown, Denies::LimitsEnforcement;
    /// `queues.<queue>.limits.allowedRegistries`.
    LIMITS_ALLOWED_REGISTRIES = "limits.allowedRegistries", "queues.<queue>.limits.allowedRegistries",
        "a container image (of any container list, ephemeral containers included) is not under an allowed registry prefix",
        "use an image from a listed registry",
        Native::Cel("every image, normalised, against the prefixes (validate::native)"),
        OnUpdate::Changed, Denies::LimitsEnforcement;
    /// `accelerators`: devices a pod asks for that cannot be counted as GPUs.
    ACCELERATORS_UNCOUNTED = "accelerators.uncounted", "queues.<queue>.limits, accelerators",
        "a pod asks for devices launchgate cannot count as GPUs — through a DeviceClass the accelerator map does not know, `allocationMode: All` without a bound, or a ResourceClaimTemplate or ResourceClaim that cannot be read — in a queue whose limits bound GPUs (a most per container, or a total, on a whole GPU such as nvidia.com/gpu)",
        "map the DeviceClass in accelerators.deviceClasses (with allDevicesAtMost for allocationMode: All), create the claim or claim template before the workload, or turn on cluster lookups so claims are read",
        Native::WebhookOnly("claims are counted through the ResourceClaimTemplates and ResourceClaims a pod names, read from the cluster; an admission policy's CEL cannot read another object"),
        OnUpdate::Changed, Denies::GpuLimits;
    /// `queues.<queue>.limits.unverifiableRuntime`.
    LIMITS_UNVERIFIABLE_RUNTIME = "limits.unverifiableRuntime", "queues.<queue>.limits.unverifiableRuntime",
        "a TrainJob leaves numNodes or resourcesPerNode to a runtime launchgate cannot read, in a queue whose totals or GPU-hour ceiling bound its size (`deny`, the default; `warn` makes it a warning)",
        "set spec.trainer.numNodes and resourcesPerNode on the TrainJob, or turn on cluster lookups so the runtime is read",
        Native::WebhookOnly("a TrainJob's pods come from its training runtime, read from the cluster; native policies do not judge TrainJobs"),
        OnUpdate::CreateOnly, Denies::UnverifiableRuntime;
    /// `queues.<queue>.limits.trainingRuntimes`.
    LIMITS_TRAINING_RUNTIMES = "limits.trainingRuntimes", "queues.<queue>.limits.trainingRuntimes",
        "`trainingRuntimes: clusterOnly` (the default): a TrainJob names a namespaced TrainingRuntime, which a tenant can own and grow after the TrainJob is admitted; only ClusterTrainingRuntimes size the queue's runs",
        "name a ClusterTrainingRuntime, or the platform team sets `trainingRuntimes: namespaced` for the queue",
        Native::WebhookOnly("a TrainJob's pods come from its training runtime, read from the cluster; native policies do not judge TrainJobs"),
        OnUpdate::Changed, Denies::TrainingRuntimes;
    /// `queues.<queue>.kueue`: the Kueue labels are the queue's.
    KUEUE_LABELS = "kueue.labels", "queues.<queue>.kueue",
        "the workload's Kueue label (LocalQueue, priority class, longest run time) differs from the queue's after the mutating webhook, or an update changed it",
        "remove the label (launchgate writes the queue's at creation) or set the queue's value; a shorter run time is fine",
        Native::Cel("the labels compared with the queue's (native::kueue)"),
        OnUpdate::Changed, Denies::Kueue;
    /// `queues.<queue>.visibleDevices`: no GPU by environment.
    VISIBLE_DEVICES_TENANT_VALUE = "visibleDevices.tenantValue", "queues.<queue>.visibleDevices",
        "a container sets NVIDIA_VISIBLE_DEVICES to something other than void (the last env entry of the name: a value, or a valueFrom launchgate cannot read): the NVIDIA container toolkit would give it the GPUs the value names — `all` is every GPU of its node — whether it asks for none (launchgate writes void there) or for some (the pod's value replaces the device plugin's list of the GPUs allocated to it); in every container of the pod templates, init and ephemeral containers included, and in a TrainJob's spec.trainer.env",
        "remove the env entry (a container that asks for no GPU gets void), or ask for the GPUs by resources or a claim",
        Native::Cel("the last env entry of the name in every container of every pod template, a Windows pod's aside (native::mutations::visible_devices_violations)"),
        OnUpdate::Changed, Denies::VisibleDevices;
    /// `queues.<queue>.guardrails.gang: deny`.
    GUARDRAILS_GANG = "guardrails.gang", "queues.<queue>.guardrails.gang",
        "`gang: deny`: a gang scheduler's minimum (a Volcano Job's spec.minAvailable, a PyTorchJob's runPolicy.schedulingPolicy.minAvailable) is below the job's rendezvous size, so the job could start half",
        "set the minimum to the rendezvous size the message names",
        Native::WebhookOnly("the rendezvous size comes from the topology reading the wiring uses"),
        OnUpdate::Changed, Denies::Gang;
    /// `queues.<queue>.guardrails.costCeiling.maxGpuHours`.
    GUARDRAILS_COST_CEILING = "guardrails.costCeiling", "queues.<queue>.guardrails.costCeiling.maxGpuHours",
        "GPUs at once × the run's bound (its run-level deadline × runs) is over the queue's GPU-hours per run, or the run has no run-level bound (`enforcement: deny`; `warn` makes it a warning)",
        "set the field the message names to at most the value it gives, allow fewer restarts, or use fewer GPUs",
        Native::WebhookOnly("GPU-hours multiply the topology's GPUs at once by the run's bound (its run-level deadline, or a JobSet's Job deadlines × (failurePolicy.maxRestarts + 1), a Volcano Job's pod deadlines × (maxRetry + 1)), with the deadline the mutation may have written; this stays in the webhook"),
        OnUpdate::Grown, Denies::CostCeiling;
    /// `queues.<queue>.pytorch.onUnwirable: deny`.
    PYTORCH_ON_UNWIRABLE = "pytorch.onUnwirable", "queues.<queue>.pytorch.onUnwirable",
        "a distributed PyTorch job launchgate would wire can never rendezvous (no master, several masters, no subdomain, parallelism below completions, …) and the queue says `onUnwirable: deny`",
        "fix the shape the message names, or opt the job out with the label launchgate.io/pytorch: \"false\"",
        Native::WebhookOnly("the distributed wiring reads the whole topology (master, ranks, world size) and, for controller-made pods, their workload (cluster lookups)"),
        OnUpdate::CreateOnly, Denies::PytorchUnwirable;
    /// A workload carrying an exemption mark launchgate did not write.
    EXEMPTIONS_UNEARNED_MARK = "exemptions.unearnedMark", "match.exemptions, queues.<queue>.exemptions",
        "the workload (or a pod template) carries launchgate.io/exempted-by, which only launchgate writes on a workload an exemption covers, and no exemption covers this one",
        "remove the annotation; exemptions go by requester and namespace",
        Native::Cel("a mark on a workload that is not a verified controller's child, refused on CREATE and on an UPDATE that brings the workload into the queue, where an exemption is configured (native::select::unproven_marks): nothing in the native policies writes one"),
        OnUpdate::Changed, Denies::Exemptions;
    /// A PyTorchJob Scale whose PyTorchJob the cache should hold and does not yet.
    SCALE_UNREADABLE_OWNER = "scale.unreadableOwner", "clusterLookups (serve --cluster-lookups)",
        "a scale-up through pytorchjobs/scale of a PyTorchJob launchgate's cluster lookups have not seen yet (created a moment ago: they watch its namespace and have listed it), so whether it is a launch workload, and its queue's limits, cannot be checked; a Scale launchgate cannot attribute at all (no cluster lookups, a namespace they do not watch) is allowed",
        "retry in a moment, or change spec.pytorchReplicaSpecs.Worker.replicas on the PyTorchJob",
        Native::WebhookOnly("a Scale carries no labels: its queue is its PyTorchJob's, read from the cluster"),
        OnUpdate::Grown, Denies::Never;
    /// An intermediate owner (a StatefulSet) carrying a launch kind's mark from someone else.
    OWNER_INTERMEDIATE = "owner.intermediate", "match.podCreators",
        "a StatefulSet whose pod template carries a launch kind's mark (leaderworkerset.sigs.k8s.io/name: the pods it makes pass as that LeaderWorkerSet's, judged on the per-pod rules and inheriting its exemption) is created, or its spec changed, by someone other than that kind's controller",
        "let the LeaderWorkerSet controller make its StatefulSets; a StatefulSet of your own carries no such label",
        Native::WebhookOnly("the webhook judges the StatefulSets the pods come from; the native policies verify no pod through one, so they judge a LeaderWorkerSet's pods as pods of their own"),
        OnUpdate::Every, Denies::Never;
    /// A LaunchQueue whose spec does not hold as a queue.
    LAUNCHQUEUE_INVALID = "launchQueue.invalid", "LaunchQueue spec (launchgate.io/v1alpha1)",
        "a LaunchQueue is created or changed with a spec that would not hold as a queue of the config launchgate serves (a wrong type, an unknown key, a limit that cannot be enforced): the message names each key path on the object",
        "fix the key paths the message names; `launchgate check-config -f <file>` checks a LaunchQueue offline",
        Native::WebhookOnly("a LaunchQueue is read by the server, which compiles it; it is no workload a policy judges"),
        OnUpdate::Every, Denies::Never;
    /// A request whose object would need more memory than the server's whole budget.
    SERVER_TOO_DENSE = "server.tooDense", "--memory-budget-mib (the pod's memory limit)",
        "the object's shape alone (tens of thousands of containers) would need more memory to review than the replica's whole budget: denied unreviewed",
        "split the workload, or raise the webhook's memory limit (the budget follows it)",
        Native::WebhookOnly("a memory budget is the webhook's; the API server bounds a policy's CEL cost itself"),
        OnUpdate::Every, Denies::Never;
    /// A request whose object would take longer to review than the request deadline allows.
    SERVER_TOO_SLOW = "server.tooSlow", "--request-deadline-ms",
        "the object's shape alone (tens of thousands of containers) would take longer to review than half the request deadline, so the answer would come after the API server gave up: denied unreviewed",
        "split the workload, or raise the request deadline and the webhook's timeoutSeconds together",
        Native::WebhookOnly("a request deadline is the webhook's; the API server bounds a policy's CEL cost itself"),
        OnUpdate::Every, Denies::Never;
}

/// The rule with `id`.
pub fn by_id(id: &str) -> Option<&'static Rule> {
    RULES.iter().copied().find(|r| r.id == id)
}

/// A warning launchgate gives that is no rule's violation: something it did to the workload,
/// or left undone, and why. Every warning carries an id — a rule's, for a violation answered
/// with a warning or one an UPDATE carries, else a notice's — so metrics
/// (`launchgate_warnings_total{rule}`), Events, the decision log, `validate -o yaml` and the
/// audit's reports name it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Notice {
    /// Stable id, config-key-like (`cache.mountTaken`); never a rule's.
    pub id: &'static str,
    /// What gives it: the setting or step (`queues.<queue>.cache`).
    pub source: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// What to do about it.
    pub action: &'static str,
}

macro_rules! notices {
    ($($(#[$doc:meta])* $name:ident = $id:literal, $source:literal, $meaning:literal, $action:literal;)*) => {
        $($(#[$doc])* pub const $name: &Notice = &Notice {
            id: $id,
            source: $source,
            meaning: $meaning,
            action: $action,
        };)*
        /// Every notice, in the order the reference lists them.
        pub const NOTICES: &[&Notice] = &[$($name),*];
    };
}

notices! {
    /// No queue resolved and no default queue.
    QUEUE_NONE = "queue.none", "queues, defaultQueue",
        "the launch workload names no configured queue and no default queue is set: nothing was checked",
        "name a configured queue in the workload's queue label, or the platform team sets defaultQueue";
    /// The queue named is not configured; the default's settings were applied.
    QUEUE_UNKNOWN = "queue.unknown", "queues, namespaceQueues, defaultQueue",
        "the queue the workload names is not configured: the namespace's or the default queue's settings were applied",
        "name a configured queue";
    /// An exemption that looks as if it applies but does not.
    EXEMPTIONS_NOT_APPLIED = "exemptions.notApplied", "match.exemptions, queues.<queue>.exemptions",
        "the object carries an exemption's labels, or launchgate's mark of one (an UPDATE of an exempt workload), but the exemption's requesters or namespaces do not match this request: a label or a mark alone exempts nothing, and such an UPDATE is judged as the requester's CREATE",
        "submit as a requester the exemption lists, or expect every rule of the queue";
    /// A mark of exemption removed by the mutating webhook.
    EXEMPTIONS_MARK_REMOVED = "exemptions.markRemoved", "match.exemptions, queues.<queue>.exemptions",
        "launchgate removed a launchgate.io/exempted-by annotation it did not write: only a workload an exemption covers carries one",
        "do not set the annotation; exemptions go by requester and namespace";
    /// An object naming a controller it cannot be verified to come from.
    OWNER_UNVERIFIED = "owner.unverified", "match.podCreators",
        "the object names a launch workload as its controller but is not verifiably that controller's (another sender, or without the owner's mark): it is judged (and wired) as a workload of its own",
        "add the controller's user to match.podCreators, or expect the object to be judged on every rule";
    /// The namespace of the object is unknown.
    LIMITS_NAMESPACE_UNKNOWN = "limits.namespaceUnknown", "queues.<queue>.limits.allowedNamespaces",
        "the request carries no namespace, so allowedNamespaces was not checked",
        "none: the API server sends the namespace of a namespaced object";
    /// Job defaults written where the kind has no such field.
    JOB_DEFAULTS_MISPLACED = "jobDefaults.misplaced", "queues.<queue>.jobDefaults",
        "a Job default names a field the workload's kind does not have; it was not written",
        "set the field the message names instead";
    /// A privileged container's securityContext is left alone.
    SECURITY_CONTEXT_PRIVILEGED = "securityContext.privileged", "queues.<queue>.securityContext",
        "a privileged container's securityContext was left as is",
        "drop privileged: true if the container does not need it";
    /// CAP_SYS_ADMIN keeps privilege escalation.
    SECURITY_CONTEXT_SYS_ADMIN = "securityContext.sysAdmin", "queues.<queue>.securityContext",
        "a container adds CAP_SYS_ADMIN, so allowPrivilegeEscalation was left unset",
        "drop the capability if the container does not need it";
    /// Containers running as root keep the pod from runAsNonRoot.
    SECURITY_CONTEXT_ROOT = "securityContext.root", "queues.<queue>.securityContext",
        "a container runs as UID 0, so pod-level runAsNonRoot was not added (the kubelet would refuse to start it)",
        "run the container as a non-root user";
    /// A TrainJob's runtime cannot be read, so its node pods were not hardened.
    SECURITY_CONTEXT_UNREADABLE_RUNTIME = "securityContext.unreadableRuntime", "queues.<queue>.securityContext",
        "the TrainJob's runtime cannot be read, so launchgate did not set the container defaults on its node pods (a privileged or root runtime would make them invalid)",
        "turn on cluster lookups, or put the runtime's manifest beside the TrainJob offline";
    /// The cache volume's name is taken.
    CACHE_VOLUME_TAKEN = "cache.volumeTaken", "queues.<queue>.cache.volumeName",
        "the pod spec already has a volume of the cache's name for other storage: the shared cache was not added",
        "rename that volume, or the platform team changes cache.volumeName";
    /// The cache volume is mounted read-only.
    CACHE_READ_ONLY = "cache.readOnly", "queues.<queue>.cache",
        "a container mounts the cache volume read-only: the cache variables were not pointed there",
        "mount it read-write, or set the variables yourself";
    /// Something else is mounted at the cache's path.
    CACHE_MOUNT_TAKEN = "cache.mountTaken", "queues.<queue>.cache.mountPath",
        "a container already mounts something at the cache's path: the shared cache was not mounted there",
        "mount the other volume elsewhere";
    /// Variables left unset because envFrom may set them.
    ENV_FROM = "env.envFrom", "queues.<queue>.cache.env, queues.<queue>.pytorch",
        "a container may receive a variable launchgate sets from envFrom, whose keys launchgate cannot see: it was left unset, since an env entry would override that value",
        "set the variables in env to have launchgate's values";
    /// A Kueue label was not written.
    KUEUE_NOT_MANAGED = "kueue.notManaged", "queues.<queue>.kueue",
        "the queue hands off to a Kueue LocalQueue, but Kueue does not manage this workload (its kind, or a child of a managed workload): no Kueue label was written",
        "none, or submit a kind Kueue manages";
    /// A Kueue label replaced by the queue's.
    KUEUE_LABEL_REPLACED = "kueue.labelReplaced", "queues.<queue>.kueue",
        "a Kueue label the workload set was replaced by the queue's value",
        "remove the label: launchgate writes the queue's";
    /// A gang minimum raised.
    GUARDRAILS_GANG_RAISED = "guardrails.gangRaised", "queues.<queue>.guardrails.gang",
        "`gang: raise`: the gang scheduler's minimum was below the job's rendezvous size and was raised to it, so the job starts whole",
        "none; set the minimum yourself to silence it";
    /// No podFailurePolicy could be added.
    GUARDRAILS_PREEMPTION = "guardrails.preemption", "queues.<queue>.guardrails.preemption",
        "no podFailurePolicy could be added (Kubernetes allows one only with restartPolicy: Never and podReplacementPolicy: Failed): a preemption or node drain counts as a failure of the run",
        "use restartPolicy: Never and podReplacementPolicy: Failed";
    /// /dev/shm was not added.
    GUARDRAILS_SHARED_MEMORY = "guardrails.sharedMemory", "queues.<queue>.guardrails.sharedMemory",
        "/dev/shm was not added: a volume of its name is no emptyDir, or a container's memory limit is below its size (it counts against that limit)",
        "rename the volume, or raise the memory limit";
    /// Several GPUs without a multi-process launcher.
    GUARDRAILS_MULTI_GPU = "guardrails.multiGpu", "queues.<queue>.guardrails.multiGpu",
        "a container asks for several GPUs but starts no multi-process launcher and sets no processes per node: a plain `python train.py` uses one",
        "start with torchrun (or another launcher), or ask for one GPU";
    /// The rendezvous Service as the cluster has it now.
    GUARDRAILS_RENDEZVOUS_PREFLIGHT = "guardrails.rendezvousPreflight", "queues.<queue>.guardrails.rendezvousPreflight",
        "the headless Service the wired Job's pods need for their rendezvous is missing or does not select them",
        "create the Service the message names";
    /// The PyTorch wiring skipped.
    PYTORCH_WIRING_SKIPPED = "pytorch.wiringSkipped", "queues.<queue>.pytorch",
        "a distributed PyTorch job launchgate would wire cannot rendezvous as written: the wiring was skipped (and `onUnwirable: deny` denies it)",
        "fix the shape the message names, or opt the job out with the label launchgate.io/pytorch: \"false\"";
    /// A pod the wiring cannot place.
    PYTORCH_POD_UNWIRED = "pytorch.podUnwired", "queues.<queue>.pytorch",
        "a controller's pod could not be placed in its job's rendezvous (no record, no Job name, its job never seen): no PyTorch env was written",
        "none; the message says what the pod lacks";
    /// RANK left unset on a pod.
    PYTORCH_RANK_UNSET = "pytorch.rankUnset", "queues.<queue>.pytorch",
        "a controller's pod carries no usable index: RANK was not set",
        "none; the message says what the pod lacks";
    /// A Volcano Job read with the default task names.
    PYTORCH_DEFAULT_TASKS = "pytorch.defaultTasks", "queues.<queue>.pytorch",
        "the pod's Volcano Job cannot be read: RANK is set assuming the default task names, the rest of the env is left to the Volcano pytorch plugin",
        "turn on cluster lookups";
    /// Arguments of the Volcano pytorch plugin ignored.
    PYTORCH_VOLCANO_PLUGIN = "pytorch.volcanoPlugin", "queues.<queue>.pytorch",
        "the Volcano pytorch plugin's arguments are not as it reads them: it ignores the rest, and so does launchgate",
        "fix the argument the message names";
    /// A TrainJob gets its env from Kubeflow Trainer.
    PYTORCH_TRAIN_JOB = "pytorch.trainJob", "queues.<queue>.pytorch",
        "a TrainJob gets no PyTorch env from launchgate: Kubeflow Trainer sets it",
        "none";
    /// A variable the user set kept.
    PYTORCH_ENV_KEPT = "pytorch.envKept", "queues.<queue>.pytorch.override",
        "a container keeps a rendezvous variable it sets, whose value differs from launchgate's",
        "remove it, or `pytorch.override: true` replaces it";
    /// A port declared with another number kept.
    PYTORCH_PORT_KEPT = "pytorch.portKept", "queues.<queue>.pytorch",
        "a container declares the rendezvous port's name with another number: it was left as is",
        "declare the rendezvous port";
    /// A hostNetwork pod's dnsPolicy kept.
    PYTORCH_HOST_NETWORK_DNS = "pytorch.hostNetworkDns", "queues.<queue>.pytorch",
        "a hostNetwork pod spec sets a dnsPolicy under which its pods cannot resolve each other: it was left as is",
        "use dnsPolicy: ClusterFirstWithHostNet";
    /// A PyTorchJob with only a generateName.
    PYTORCH_NO_MASTER_WAIT = "pytorch.noMasterWait", "queues.<queue>.pytorch",
        "a PyTorchJob with only a generateName: its master's address is not known at admission, so its workers get no wait-for-master init container",
        "give the PyTorchJob a name";
    /// A variable the PyTorchJob operator overrides.
    PYTORCH_OPERATOR_ENV = "pytorch.operatorEnv", "queues.<queue>.pytorch",
        "a container sets a variable the PyTorchJob operator appends its own of, which wins",
        "remove it";
    /// Warnings beyond what the API server shows.
    SERVER_WARNINGS_OMITTED = "server.warningsOmitted", "the API server's warning budget",
        "more warnings than the API server shows in one response: the rest were omitted",
        "fix the warnings shown, then look again";
}

/// The notice with `id`.
pub fn notice_by_id(id: &str) -> Option<&'static Notice> {
    NOTICES.iter().copied().find(|n| n.id == id)
}

/// One warning given to the user: its message and the id of its rule or notice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Warning {
    /// The rule's or notice's id.
    pub rule: &'static str,
    /// The warning as kubectl prints it.
    pub message: String,
}

impl Warning {
    /// A warning of `notice`.
    pub fn new(notice: &'static Notice, message: impl Into<String>) -> Self {
        debug_assert!(
            notice_by_id(notice.id).is_some_and(|n| n == notice),
            "notice {} is not in rules::NOTICES",
            notice.id
        );
        Warning {
            rule: notice.id,
            message: message.into(),
        }
    }

    /// The warning a violation answered with a warning (or carried by an UPDATE) gives.
    pub fn of(violation: &Violation) -> Self {
        Warning {
            rule: violation.rule.id,
            message: violation.message.clone(),
        }
    }
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
    /// The value is an amount over a maximum (`exceeds maximum 4`): an UPDATE that makes it
    /// no larger is not refused by a rule whose [`OnUpdate`] is
    /// [`OnUpdate::GrownOverMaximum`].
    #[serde(skip)]
    pub over_maximum: bool,
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
            over_maximum: false,
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

    /// With the bound broken: a maximum the value is over (an amount), or another bound.
    pub fn bound(self, problem: impl Into<String>, over_maximum: bool) -> Self {
        Violation {
            over_maximum,
            ..self.limit(problem)
        }
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

/// Most violations an answer to the API server shows (a denial's message, the audit
/// annotation); the rest are counted on the last line, `… and N more violations`. The decision
/// log, the metrics and the reports of `validate` and `audit` hold every one.
pub const MAX_SHOWN_VIOLATIONS: usize = 20;
/// Most bytes of one line of an answer: a longer one is cut and ends with `…`.
pub const MAX_LINE_BYTES: usize = 1024;
/// Most bytes of a denial's message, every line together.
pub const MAX_MESSAGE_BYTES: usize = 16 << 10;
/// Most parts a message lists (the pod templates a total or the GPUs at once add up, the
/// templates a rule finds at fault); the rest are counted, `… and N more`.
pub const MAX_LISTED_PARTS: usize = 8;

/// The anchor of a rule's (or notice's) section on the generated rules page
/// (`limits.variables` → `limits-variables`).
pub fn anchor(id: &str) -> String {
    id.replace('.', "-")
}

/// Where the rules page is under a documentation site's root.
pub const RULES_PAGE: &str = "reference/rules.html";

/// Whether `url` can be a documentation site's root (`docsUrl`): an `http` or `https` URL
/// with a host, no query and no fragment, that links can be appended to.
pub fn check_docs_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| {
            format!("{url:?} is no http(s) URL (`https://docs.example.com/launchgate`)")
        })?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{url:?} has no host"));
    }
    if let Some(c) = rest
        .chars()
        .find(|c| matches!(c, '?' | '#') || c.is_whitespace())
    {
        return Err(format!(
            "{url:?} holds {c:?}: give the site's root, links to its pages are appended to it"
        ));
    }
    Ok(())
}

/// The line a denial ends with when the site is known (`docsUrl`): a link to the section of
/// each rule (ids distinct, in order).
pub fn links_line(docs_url: &str, ids: &[&str]) -> String {
    let links: Vec<String> = ids.iter().map(|id| link(docs_url, id)).collect();
    format!("{LINKS_LEAD}{}", listed(&links))
}

/// What [`links_line`] starts with.
pub const LINKS_LEAD: &str = "see ";

/// The address of a rule's (or notice's) section on the documentation site at `docs_url`.
pub fn link(docs_url: &str, id: &str) -> String {
    let root = docs_url.trim_end_matches('/');
    format!("{root}/{RULES_PAGE}#{}", anchor(id))
}

/// `parts` joined with `, `: the first [`MAX_LISTED_PARTS`], then `… and N more`.
pub fn listed<S: AsRef<str>>(parts: &[S]) -> String {
    let mut out = String::new();
    for (i, part) in parts.iter().take(MAX_LISTED_PARTS).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(part.as_ref());
    }
    if parts.len() > MAX_LISTED_PARTS {
        out.push_str(&format!(", … and {} more", parts.len() - MAX_LISTED_PARTS));
    }
    out
}

/// `line` cut to at most [`MAX_LINE_BYTES`] (at a character boundary, ending with `…`).
pub fn bounded_line(line: &str) -> std::borrow::Cow<'_, str> {
    if line.len() <= MAX_LINE_BYTES {
        return line.into();
    }
    let mut end = MAX_LINE_BYTES - '…'.len_utf8();
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end]).into()
}

/// The message of an answer: the first [`MAX_SHOWN_VIOLATIONS`] of `violations` (one line
/// each, every line bounded by [`bounded_line`]), `… and N more violations` for the rest, then
/// the `notes` that still fit; [`MAX_MESSAGE_BYTES`] at most in all.
pub fn bounded_message<'a>(
    violations: impl ExactSizeIterator<Item = &'a str>,
    notes: impl Iterator<Item = &'a str>,
) -> String {
    // Room kept for the line that counts what was left out.
    const MORE_LINE: usize = 64;
    let total = violations.len();
    let mut out = String::new();
    let mut shown = 0;
    for line in violations.take(MAX_SHOWN_VIOLATIONS) {
        let line = bounded_line(line);
        if shown > 0 && out.len() + 1 + line.len() > MAX_MESSAGE_BYTES - MORE_LINE {
            break;
        }
        if shown > 0 {
            out.push('\n');
        }
        out.push_str(&line);
        shown += 1;
    }
    if shown < total {
        out.push_str(&format!("\n… and {} more violations", total - shown));
    }
    for note in notes {
        let note = bounded_line(note);
        if out.len() + 1 + note.len() > MAX_MESSAGE_BYTES {
            break;
        }
        out.push('\n');
        out.push_str(&note);
    }
    out
}

/// The distinct rule ids of `violations`, in first-seen order.
pub fn ids<'a>(violations: impl IntoIterator<Item = &'a Violation>) -> Vec<&'static str> {
    distinct(violations.into_iter().map(|v| v.rule.id))
}

/// The distinct rule or notice ids of `warnings`, in first-seen order.
pub fn warning_ids<'a>(warnings: impl IntoIterator<Item = &'a Warning>) -> Vec<&'static str> {
    distinct(warnings.into_iter().map(|w| w.rule))
}

fn distinct(ids: impl Iterator<Item = &'static str>) -> Vec<&'static str> {
    let mut out = Vec::new();
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_go_to_each_rules_section_once_under_the_sites_root() {
        assert_eq!(
            links_line(
                "https://d.example/lg/",
                &["limits.variables", "limits.totals"]
            ),
            "see https://d.example/lg/reference/rules.html#limits-variables, https://d.example/lg/reference/rules.html#limits-totals"
        );
        assert_eq!(
            links_line("http://d.example", &["kueue.queueName"]),
            "see http://d.example/reference/rules.html#kueue-queueName"
        );
        assert!(check_docs_url("https://d.example/lg").is_ok());
        assert!(check_docs_url("https://d.example/a b").is_err());
    }

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
    fn notice_ids_are_unique_config_like_documented_and_no_rules() {
        let mut seen: std::collections::BTreeSet<&str> = RULES.iter().map(|r| r.id).collect();
        for n in NOTICES {
            assert!(seen.insert(n.id), "{} twice, or a rule's", n.id);
            let (area, name) = n.id.split_once('.').expect("area.name");
            assert!(
                [area, name]
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric())),
                "{}",
                n.id
            );
            assert!(!n.source.is_empty() && !n.meaning.is_empty() && !n.action.is_empty());
            assert_eq!(notice_by_id(n.id), Some(*n));
        }
        let w = Warning::new(CACHE_MOUNT_TAKEN, "m");
        assert_eq!(
            serde_json::to_value(&w).unwrap(),
            serde_json::json!({"rule": "cache.mountTaken", "message": "m"})
        );
        let v = Violation::new(LIMITS_TOTALS, "over").effect(Effect::Warn);
        assert_eq!(Warning::of(&v).rule, "limits.totals");
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
