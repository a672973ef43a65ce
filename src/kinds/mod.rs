//! The model of the workload kinds launchgate understands: one descriptor per kind, one file
//! per kind, and everything that differs between kinds read from them.
//!
//! A descriptor ([`KindSpec`]) states, as data, what a kind is: its API coordinates, every
//! pod-template position with its role, its pod count and its upper bound, how a position binds
//! to a queue template (by name, never by index), its run-level fields, the objects its
//! controller makes and how they prove it, and its Kueue integration. The Rust template walk
//! (`workload`), the queue-template binding and totals (`validate`), owner verification
//! (`policy::owner`), the compiled CEL (`native`), `compile-native --report`, `audit`'s list of
//! kinds and the webhook rules all read the descriptors, so a kind is added by adding its file
//! and one line in [`FILES`].

mod job;
mod jobset;
mod leaderworkerset;
mod mpijob;
mod pod;
mod pytorchjob;
mod ray;
pub mod trainjob;
mod volcano;

use serde_json::Value;
use std::fmt;
use std::hash::{Hash, Hasher};

/// Every kind launchgate understands, by the file that describes it, in the order lists of
/// kinds are printed.
static FILES: &[&[&KindSpec]] = &[
    pod::KINDS,
    job::KINDS,
    volcano::KINDS,
    pytorchjob::KINDS,
    jobset::KINDS,
    trainjob::KINDS,
    ray::KINDS,
    mpijob::KINDS,
    leaderworkerset::KINDS,
];

/// Every kind's descriptor, in [`FILES`]' order.
pub fn all() -> impl Iterator<Item = &'static KindSpec> {
    FILES.iter().flat_map(|file| file.iter().copied())
}

/// A kind's descriptor.
#[derive(Debug)]
pub struct KindSpec {
    /// A short stable name, unique among the kinds: metrics, messages, `match.podCreators` keys.
    pub name: &'static str,
    /// API group (`""` for core), version, the object's `kind` and the plural resource.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub resource: &'static str,
    /// The subresources whose requests change what the queue's limits cover, which are judged
    /// (every other subresource is not).
    pub subresources: &'static [&'static str],
    /// Fields of `spec` that tell this kind apart in a queue template that names no
    /// `apiVersion` (a PyTorchJob has `pytorchReplicaSpecs`); empty for the kinds a template
    /// recognises by `kind` alone.
    pub signature: &'static [&'static str],
    /// Every pod-template position, in the order the walk visits them.
    pub positions: &'static [Position],
    /// Its pods come from a runtime the object names (a Trainer v2 TrainJob), not from pod
    /// templates of its own: how the runtime is read.
    pub runtime: Option<&'static RuntimeSpec>,
    /// The run-level fields.
    pub run: Run,
    /// What this kind's controller makes, and how each proves it.
    pub makes: &'static [Makes],
    /// The identities the upstream controller of this kind runs as wherever it is installed
    /// (the default `match.podCreators` entry): only identities a tenant cannot take — never one
    /// in a namespace tenants commonly hold, such as `default`, where anyone who may create a
    /// pod can run it as any of its service accounts (`policy::owner`'s tests hold every
    /// descriptor to it). A controller with no such identity has none here, and the platform
    /// team names its own.
    pub controller: &'static [&'static str],
    /// How Kueue manages it.
    pub kueue: Kueue,
    /// The native admission policies cover it (else the webhook only, with the reason, which
    /// `compile-native --report` prints).
    pub native: Result<(), &'static str>,
    /// The labels (or annotations) by which a pod this kind's controller makes names the
    /// holder it comes from (a Volcano task, a PyTorchJob replica type, a JobSet replicated
    /// job, a Ray group), in the order they are read: a controller-made Pod binds to the queue
    /// template's holder of that name.
    pub role_marks: &'static [RoleMark],
    /// Where its batch/v1 Job specs are (the preemption guardrail gives them a
    /// `podFailurePolicy`; an Indexed Job can end with rank zero).
    pub job_specs: JobSpecs,
    /// Its apiVersion also serves kinds launchgate does not check (kubeflow.org/v1: TFJob,
    /// MPIJob), so a queue template that names the apiVersion without a `kind` is of this kind
    /// only with a [`KindSpec::signature`] field.
    pub shared_version: bool,
    /// The kind's name among the webhook's admission rules (the chart's `webhook.rules` keys,
    /// `serve --webhook-rules`).
    pub webhook_rule: &'static str,
    /// Its gang scheduler's minimum, which `guardrails.gang` holds to every pod of the run.
    pub gang: Option<Gang>,
    /// Its scale subresource, judged as an UPDATE of the field it writes.
    pub scale: Option<Scale>,
    /// Whether the server keeps a cached watch of this kind, so that a request about
    /// something else can read an object of it.
    pub watch: Watch,
    /// What W&B Launch makes of a queue template that names no kind (its default Kubernetes
    /// resource): true of one kind, the batch/v1 Job.
    pub launch_default: bool,
}

/// How a kind's pods come from a runtime the object names (a Trainer v2 TrainJob's
/// ClusterTrainingRuntime or TrainingRuntime): where the object names it, which objects are
/// runtimes, what a runtime renders into (the kind its controller makes, [`KindSpec::makes`]),
/// and where the object's own settings and patches go in it. `workload::runtime` reads it.
#[derive(Debug)]
pub struct RuntimeSpec {
    /// Where the object names its runtime: an object of `name` and `kind` (unset:
    /// [`RuntimeSpec::cluster`]).
    pub reference: &'static [&'static str],
    /// The runtime kinds (of the kind's own API group and version): the cluster-scoped one,
    /// which the object names by default, and the namespaced one.
    pub cluster: &'static str,
    pub namespaced: &'static str,
    /// Where a runtime holds the object it renders (a JobSet template).
    pub renders: &'static [&'static str],
    /// The holder of the rendered object that runs the nodes: the one whose field `step`
    /// (from the holder) is `step_is`, or, where no holder has that field, the one named
    /// [`RuntimeSpec::node`].
    pub step: &'static [&'static str],
    pub step_is: &'static str,
    /// The name of the nodes' holder and of their container, which the object's settings
    /// and patches apply to.
    pub node: &'static str,
    /// The object's settings for the node container (image, env, resources, node count). The
    /// settings and the patches are two keys deep, under one map (`spec`).
    pub settings: &'static [&'static str],
    /// The settings' node count, else the runtime's field, else `default_nodes`; written to
    /// each field `nodes_at` of the map `job` of the nodes' holder (its Job's spec).
    pub nodes: &'static str,
    pub runtime_nodes: &'static [&'static str],
    pub default_nodes: i64,
    pub job: &'static [&'static str],
    pub nodes_at: &'static [&'static str],
    /// The settings' resources of each node (the node container's `resources`) and image
    /// (its `image`). The node count and the resources are what the object can leave to
    /// its runtime.
    pub resources: &'static str,
    pub image: &'static str,
    /// The settings' env of the node container (a tenant's variables, which the controller
    /// writes into it).
    pub env: &'static str,
    /// Where the object's patches to the runtime are (a list of entries, each keyed by
    /// `manager`), and where an entry holds its part of the rendered object.
    pub patches: &'static [&'static str],
    pub patch_renders: &'static [&'static str],
}

/// Whether, and which of, a kind's objects the server keeps in a cached watch
/// ([`crate::cluster::ClusterView::workload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// None.
    No,
    /// Those the watch scope selects (`--owner-watch-namespaces`, `--owner-watch-selector`), listed before
    /// the server is ready: its pods read their wiring from it (a Volcano Job).
    Selected,
    /// Every one, not waited for: a Scale is judged against what it scales (a PyTorchJob), a
    /// controller's child against its owner's bound (a TrainJob). Until the list arrives the
    /// object is unknown, and the rule that reads it says what then.
    Every,
}

impl KindSpec {
    /// What a descriptor that does not say otherwise is: no positions, no run-level defaults,
    /// nothing made, no controller trusted, covered by the native policies, no gang, no scale
    /// subresource, not watched. A descriptor states its identity (`name`, `group`, `version`,
    /// `kind`, `resource`, `webhook_rule`), its positions, its run (deadline and end, from
    /// [`Run::UNSTATED`]) and its Kueue integration — neither has a default, [`unstated`]
    /// refuses, when launchgate is compiled, a kind that leaves them out — and takes the rest
    /// from here (`..KindSpec::BASE`).
    pub const BASE: KindSpec = KindSpec {
        name: "",
        group: "",
        version: "",
        kind: "",
        resource: "",
        subresources: &[],
        signature: &[],
        positions: &[],
        runtime: None,
        run: Run::UNSTATED,
        makes: &[],
        controller: &[],
        kueue: Kueue::No(""),
        native: Ok(()),
        role_marks: &[],
        job_specs: JobSpecs::None,
        shared_version: false,
        webhook_rule: "",
        gang: None,
        scale: None,
        watch: Watch::No,
        launch_default: false,
    };
}

/// A gang scheduler's minimum: the fewest of the run's pods it starts together. A run whose
/// ranks wait for each other at rendezvous starts whole only when that minimum is every pod
/// (the sum of its positions' replicas).
#[derive(Debug)]
pub struct Gang {
    /// The field, from the object's root (unset: the operator's default, every pod).
    pub at: &'static [&'static str],
    /// The run waits for all its pods only when this holds (a Volcano Job's pytorch plugin).
    pub when: Option<Cond>,
}

/// The name of the scale subresource (`<resource>/scale`).
pub const SCALE_SUBRESOURCE: &str = "scale";

/// Where the `autoscaling/v1` Scale a scale subresource request carries holds the count it
/// asks for; [`Scale::replicas`] says which field of the kind that count writes.
pub const SCALE_REPLICAS: &str = "/spec/replicas";

/// A scale subresource (`<resource>/scale`, an `autoscaling/v1` Scale) and the field its
/// `spec.replicas` writes (the CRD's `specReplicasPath`).
#[derive(Debug)]
pub struct Scale {
    /// The field, from the object's root.
    pub replicas: &'static [&'static str],
    /// What it counts, for messages (`Worker replicas`).
    pub counts: &'static str,
}

/// Where a controller-made pod names the holder it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleMark {
    Label(&'static str),
    Annotation(&'static str),
}

/// Where a kind's batch/v1 Job specs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobSpecs {
    /// None.
    None,
    /// The object is a batch/v1 Job: its `spec`, defaulted by the API server before admission
    /// (an unset `podReplacementPolicy` arrives as the default).
    Object,
    /// Each pod template sits in the spec of a Job template (its `template`), which nothing
    /// defaults before admission; its controller's webhook defaults the pods'
    /// `restartPolicy` (a JobSet's replicated Jobs).
    Templates,
}

/// One pod-template position of a kind: a holder (or a list or map of them) and the template
/// under it.
#[derive(Debug)]
pub struct Position {
    /// What a pod of this position is, for messages and docs (`task`, `worker group`).
    pub role: &'static str,
    /// Where the holders are.
    pub holders: Holders,
    /// The path from a holder to its pod template (empty when the holder is the template).
    pub template: &'static [&'static str],
    /// How a holder binds to the queue template's holder of the same position.
    pub naming: Naming,
    /// How many pods run from one holder, as written.
    pub replicas: Num,
    /// The most pods of one holder that can run at once: scaling bounds (elastic, autoscaling)
    /// counted, `replicas` otherwise. Totals and the cost ceiling read it.
    pub at_most: Num,
}

/// Where a position's holders are, from the object's root.
#[derive(Debug, Clone, Copy)]
pub enum Holders {
    /// The object is the template (a bare Pod).
    Root,
    /// One holder at the path.
    At(&'static [&'static str]),
    /// Every entry of the list at the path.
    Each(&'static [&'static str]),
    /// Every entry of the map at the path, in byte order of the keys (CEL walks a map in no
    /// defined order, so the compiled CEL sorts the keys the same way).
    Keyed(&'static [&'static str]),
}

impl Holders {
    /// The path of the holders from the root (empty for [`Holders::Root`]).
    pub fn path(self) -> &'static [&'static str] {
        match self {
            Holders::Root => &[],
            Holders::At(p) | Holders::Each(p) | Holders::Keyed(p) => p,
        }
    }
}

/// What names a holder, so a queue template's holder binds to the workload's of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// One holder: nothing to bind.
    None,
    /// The holder's field (`name` of a Volcano task, `groupName` of a Ray worker group).
    Field(&'static str),
    /// The map key (a PyTorchJob's replica type), compared case-insensitively.
    Key,
}

/// Where a [`Num`] reads a field from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// The holder of the position.
    Holder,
    /// The object.
    Object,
}

impl From {
    /// What it names: `holder` or `object`.
    pub fn base<'a>(self, object: &'a Value, holder: &'a Value) -> &'a Value {
        match self {
            From::Holder => holder,
            From::Object => object,
        }
    }
}

/// A count read from the object: the one small language both the Rust walk and the compiled
/// CEL evaluate, so they count alike.
#[derive(Debug)]
pub enum Num {
    /// A constant.
    Lit(i64),
    /// An integer field, or `default` when it is absent or not an integer.
    Int {
        from: From,
        at: &'static [&'static str],
        default: i64,
    },
    /// The smaller of two.
    Min(&'static Num, &'static Num),
    /// The larger of two.
    Max(&'static Num, &'static Num),
    /// The product of two (saturating).
    Mul(&'static Num, &'static Num),
    /// The sum of two (saturating): the groups of a set and those a rolling update may add.
    Add(&'static Num, &'static Num),
    /// The first less the second (saturating): a group's pods less its leader.
    Sub(&'static Num, &'static Num),
    /// `then` when `when` holds, else `otherwise`.
    If {
        when: Cond,
        then: &'static Num,
        otherwise: &'static Num,
    },
    /// An int-or-percent field (a Kubernetes `IntOrString`: a LeaderWorkerSet's `maxSurge`):
    /// an integer as it is; `N%` (at most [`PERCENT_DIGITS`] digits) as N % of `of`, rounded
    /// up as the controllers round a surge, `of` taken between 0 and `i32::MAX`; `default`
    /// when it is absent or neither.
    Scaled {
        from: From,
        at: &'static [&'static str],
        of: &'static Num,
        default: i64,
    },
}

/// The most digits a [`Num::Scaled`] percentage has (what the compiled CEL can multiply
/// without overflow).
pub const PERCENT_DIGITS: usize = 9;

/// The N of a percentage `N%` ([`Num::Scaled`]), if `text` is one.
pub fn percent(text: &str) -> Option<i64> {
    let digits = text.strip_suffix('%')?;
    if digits.is_empty()
        || digits.len() > PERCENT_DIGITS
        || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    digits.parse().ok()
}

/// `n` % of `of` ([`Num::Scaled`]), rounded up, `of` taken between 0 and `i32::MAX`.
pub fn percent_of(n: i64, of: i64) -> i64 {
    let of = of.clamp(0, i64::from(i32::MAX));
    (n.saturating_mul(of) + 99) / 100
}

impl Num {
    /// The integer field at `at` of the position's holder, or `default`.
    pub const fn holder(at: &'static [&'static str], default: i64) -> Num {
        Num::Int {
            from: From::Holder,
            at,
            default,
        }
    }

    /// The integer field at `at` of the object, or `default`.
    pub const fn object(at: &'static [&'static str], default: i64) -> Num {
        Num::Int {
            from: From::Object,
            at,
            default,
        }
    }
}

/// A condition a [`Num`] can test.
#[derive(Debug)]
pub enum Cond {
    /// A boolean field is `true`.
    True {
        from: From,
        at: &'static [&'static str],
    },
    /// A field is present (not null).
    Has {
        from: From,
        at: &'static [&'static str],
    },
    /// The holder's map key equals this, compared case-insensitively.
    KeyIs(&'static str),
    /// A text field is one of these (the first is what a default writes for it to hold).
    OneOf {
        from: From,
        at: &'static [&'static str],
        any_of: &'static [&'static str],
    },
}

/// A field reached by a path of keys from a value.
pub fn field<'a>(from: &'a Value, at: &[&str]) -> Option<&'a Value> {
    at.iter().try_fold(from, |v, k| v.get(*k))
}

/// [`field`], to change it.
pub fn field_mut<'a>(from: &'a mut Value, at: &[&str]) -> Option<&'a mut Value> {
    at.iter().try_fold(from, |v, k| v.get_mut(*k))
}

impl Num {
    /// Evaluates the count for a holder (`key`: its map key, for [`Holders::Keyed`]).
    pub fn eval(&self, object: &Value, holder: &Value, key: Option<&str>) -> i64 {
        match self {
            Num::Lit(n) => *n,
            Num::Int { from, at, default } => field(from.base(object, holder), at)
                .and_then(Value::as_i64)
                .unwrap_or(*default),
            Num::Min(a, b) => a.eval(object, holder, key).min(b.eval(object, holder, key)),
            Num::Max(a, b) => a.eval(object, holder, key).max(b.eval(object, holder, key)),
            Num::Mul(a, b) => a
                .eval(object, holder, key)
                .saturating_mul(b.eval(object, holder, key)),
            Num::Add(a, b) => a
                .eval(object, holder, key)
                .saturating_add(b.eval(object, holder, key)),
            Num::Sub(a, b) => a
                .eval(object, holder, key)
                .saturating_sub(b.eval(object, holder, key)),
            Num::If {
                when,
                then,
                otherwise,
            } => {
                if when.holds(object, holder, key) {
                    then.eval(object, holder, key)
                } else {
                    otherwise.eval(object, holder, key)
                }
            }
            Num::Scaled {
                from,
                at,
                of,
                default,
            } => match field(from.base(object, holder), at) {
                Some(Value::Number(n)) => n.as_i64().unwrap_or(*default),
                Some(Value::String(text)) => {
                    percent(text).map_or(*default, |n| percent_of(n, of.eval(object, holder, key)))
                }
                _ => *default,
            },
        }
    }
}

impl Cond {
    /// Whether the condition holds for a holder.
    pub fn holds(&self, object: &Value, holder: &Value, key: Option<&str>) -> bool {
        let base = |from: &From| from.base(object, holder);
        match self {
            Cond::True { from, at } => field(base(from), at).and_then(Value::as_bool) == Some(true),
            Cond::Has { from, at } => field(base(from), at).is_some_and(|v| !v.is_null()),
            Cond::KeyIs(want) => key.is_some_and(|k| k.eq_ignore_ascii_case(want)),
            Cond::OneOf { from, at, any_of } => field(base(from), at)
                .and_then(Value::as_str)
                .is_some_and(|v| any_of.contains(&v)),
        }
    }

    /// The value a default writes for the condition to hold (`true`, or the first text a
    /// [`Cond::OneOf`] allows): `None` for a condition nothing can write.
    pub fn written(&self) -> Option<Value> {
        match self {
            Cond::True { .. } => Some(Value::Bool(true)),
            Cond::OneOf { any_of, .. } => any_of.first().map(|v| Value::from(*v)),
            Cond::Has { .. } | Cond::KeyIs(_) => None,
        }
    }

    /// The field a default writes for the condition to hold, read from the object.
    pub fn field_written(&self) -> Option<&'static [&'static str]> {
        match self {
            Cond::True {
                from: From::Object,
                at,
            }
            | Cond::OneOf {
                from: From::Object,
                at,
                ..
            } => Some(at),
            _ => None,
        }
    }

    /// What to write for the condition to hold of the object, for messages
    /// (`spec.shutdownAfterJobFinishes: true`).
    pub fn wanted(&self) -> String {
        match self {
            Cond::True { at, .. } => format!("{}: true", at.join(".")),
            Cond::Has { at, .. } => at.join("."),
            Cond::KeyIs(key) => format!("the key {key}"),
            Cond::OneOf { at, any_of, .. } => {
                format!("{}: {}", at.join("."), any_of.first().unwrap_or(&""))
            }
        }
    }

    /// How the condition fails, for messages (`spec.shutdownAfterJobFinishes is not true`).
    pub fn unmet(&self) -> String {
        match self {
            Cond::True { at, .. } => format!("{} is not true", at.join(".")),
            Cond::Has { at, .. } => format!("{} is not set", at.join(".")),
            Cond::KeyIs(key) => format!("the key is not {key}"),
            Cond::OneOf { at, any_of, .. } => {
                format!("{} is not {}", at.join("."), any_of.join(" or "))
            }
        }
    }
}

/// The run-level fields of a kind.
#[derive(Debug)]
pub struct Run {
    /// Where the run's deadline lives, which the GPU-hour ceiling reads and
    /// `guardrails.costCeiling.defaultDeadlineSeconds` writes.
    pub deadline: Deadline,
    /// The fields the queue's job defaults (`jobDefaults`) write, in this order.
    pub defaults: &'static [RunDefault],
    /// How often the run starts over with a fresh deadline (`None`: its deadline covers every
    /// restart).
    pub restarts: Option<Restarts>,
    /// What ends the run's resources (the pods that hold its GPUs): the GPU-hour ceiling counts
    /// a run by its [`Run::deadline`] only where they end with the run.
    pub ends: Ends,
    /// Who restarts a failed pod within the run's deadline, and the field that bounds how
    /// often (a PyTorchJob's training operator, `runPolicy.backoffLimit`): why a pod template's
    /// own deadline does not bound the run.
    pub pod_restarts: Option<PodRestarts>,
}

impl Run {
    /// What a descriptor builds its run from (`..Run::UNSTATED`): no defaults, no restarts —
    /// and a deadline and an end that say nothing, so the descriptor states both (how its run
    /// is bounded and whether its pods end with it change what the GPU-hour ceiling and the
    /// deadline default do). The registry's compile-time check ([`unstated`]) refuses a kind
    /// that leaves either unstated.
    pub const UNSTATED: Run = Run {
        deadline: Deadline::Never { why: "", set: "" },
        defaults: &[],
        restarts: None,
        ends: Ends::When {
            cond: Cond::True {
                from: From::Object,
                at: &[],
            },
            keeps: "",
        },
        pod_restarts: None,
    };
}

/// What `spec` leaves unstated of what changes a guarantee, if anything: its run's deadline
/// or end ([`Run::UNSTATED`]'s, whose explanations are empty) or its Kueue integration
/// ([`KindSpec::BASE`]'s `Kueue::No("")`).
pub const fn unstated(spec: &KindSpec) -> Option<&'static str> {
    if let Deadline::Never { why, set } = spec.run.deadline
        && (why.is_empty() || set.is_empty())
    {
        return Some(
            "a kind descriptor leaves its run's deadline unstated: set run.deadline (Deadline::Never, with why and what to set instead, for a kind no deadline bounds)",
        );
    }
    if let Ends::When { keeps, .. } = &spec.run.ends
        && keeps.is_empty()
    {
        return Some(
            "a kind descriptor leaves what ends its run unstated: set run.ends (Ends::WithRun, Ends::When with what it keeps, or Ends::Never)",
        );
    }
    if let Kueue::No(why) = spec.kueue
        && why.is_empty()
    {
        return Some(
            "a kind descriptor leaves its Kueue integration unstated: set kueue (Kueue::No with why Kueue does not manage it)",
        );
    }
    None
}

/// Every registered descriptor states what changes a guarantee ([`unstated`]), checked when
/// launchgate is compiled: a kind added without it does not build.
const CHECKED: () = {
    let mut f = 0;
    while f < FILES.len() {
        let mut k = 0;
        while k < FILES[f].len() {
            if let Some(why) = unstated(FILES[f][k]) {
                panic!("{}", why);
            }
            k += 1;
        }
        f += 1;
    }
};
const _: () = CHECKED;

impl RunDefault {
    /// What a run default that does not say otherwise is: it replaces only an absent (or null)
    /// field, in a holder that exists, whatever the object holds. A default states its
    /// `setting` and `at` and takes the rest from here (`..RunDefault::BASE`).
    pub const BASE: RunDefault = RunDefault {
        setting: Setting::Ttl,
        at: &[],
        replaces: Replaces::Absent,
        make: false,
        when: None,
        unless: None,
        misplaced: None,
    };

    /// The default of `setting` at `at`, the rest as [`RunDefault::BASE`].
    pub const fn of(setting: Setting, at: &'static [&'static str]) -> RunDefault {
        RunDefault {
            setting,
            at,
            ..RunDefault::BASE
        }
    }

    /// [`RunDefault::of`], its field's map created where it is missing ([`RunDefault::make`]).
    pub const fn made(setting: Setting, at: &'static [&'static str]) -> RunDefault {
        RunDefault {
            make: true,
            ..RunDefault::of(setting, at)
        }
    }
}

/// Who restarts a failed pod within a run, and the field that bounds how often.
#[derive(Debug)]
pub struct PodRestarts {
    pub by: &'static str,
    pub at: &'static [&'static str],
}

/// What ends a run's resources: whether the pods that hold its GPUs go when the run ends (it
/// finishes, fails, or reaches its deadline), or outlive it.
#[derive(Debug)]
pub enum Ends {
    /// The pods end with the run: its controller stops them when the run finishes or reaches
    /// its deadline (a batch/v1 Job, a JobSet, a Volcano Job, a PyTorchJob, a TrainJob, a
    /// bare Pod).
    WithRun,
    /// The pods end with the run only when the condition holds of the object as it is stored
    /// (a RayJob's RayCluster is deleted at the end only with
    /// `spec.shutdownAfterJobFinishes: true`); otherwise they outlive the run, and `keeps`
    /// says what stays (for messages). Where the condition is a field a default can write
    /// ([`Cond::written`]: `true`, or the first text of a [`Cond::OneOf`]), the queue's job
    /// defaults write it where it is unset (a [`RunDefault`] of [`Setting::EndWithRun`] at that
    /// field, before every default its condition gates); a run stored without it has no
    /// run-level bound for the GPU-hour ceiling.
    When { cond: Cond, keeps: &'static str },
    /// Nothing ends them but deletion (a RayCluster, whose [`Run::deadline`] is
    /// [`Deadline::Never`]).
    Never,
}

impl Ends {
    /// What a [`Setting::EndWithRun`] default writes: the value the end condition needs.
    pub fn written(&self) -> Option<Value> {
        match self {
            Ends::When { cond, .. } => cond.written(),
            Ends::WithRun | Ends::Never => None,
        }
    }

    /// Why the object's resources outlive its run, if they do: (what fails, what it keeps, and
    /// what to write). `None` for [`Ends::WithRun`], for a condition that holds, and for
    /// [`Ends::Never`] (judged by its [`Deadline::Never`]).
    pub fn outlives(&self, object: &Value) -> Option<(String, &'static str, String)> {
        match self {
            Ends::When { cond, keeps } if !cond.holds(object, object, None) => {
                Some((cond.unmet(), keeps, cond.wanted()))
            }
            Ends::WithRun | Ends::When { .. } | Ends::Never => None,
        }
    }
}

/// The `jobDefaults` setting a [`RunDefault`] takes its value from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// `backoffLimit`: how often the run is retried.
    BackoffLimit,
    /// `ttlSecondsAfterFinished`.
    Ttl,
    /// `volcanoMaxRetry`.
    VolcanoMaxRetry,
    /// `restartPolicy` of the pods.
    RestartPolicy,
    /// No setting of its own: the value of the field an [`Ends::When`] run needs for its
    /// resources to end with it ([`Ends::written`]), written whenever the queue's job defaults
    /// are on.
    EndWithRun,
}

impl Setting {
    /// The key of `jobDefaults` that holds the setting.
    pub fn key(self) -> &'static str {
        match self {
            Setting::BackoffLimit => "backoffLimit",
            Setting::Ttl => "ttlSecondsAfterFinished",
            Setting::VolcanoMaxRetry => "volcanoMaxRetry",
            Setting::RestartPolicy => "restartPolicy",
            Setting::EndWithRun => "enabled",
        }
    }
}

/// What already written value a [`RunDefault`] replaces, besides an absent or null one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaces {
    /// Nothing else.
    Absent,
    /// This value, which the controller reads as unset (Volcano's `maxRetry: 0`).
    Value(i64),
    /// The value the API server writes when the user sets none, before admission (a batch/v1
    /// Job's `backoffLimit: 6`): replaced unless the user wrote it (kubectl's
    /// last-applied-configuration, a server-side apply manager owning the field; for a
    /// `backoffLimit` also the `launchgate.io/keep-backoff-limit` annotation, and the queue's
    /// `treatApiDefaultBackoffAsUnset`). A CRD's schema defaults (a RayJob's `backoffLimit: 0`)
    /// arrive the same way.
    ApiDefault(i64),
    /// Both: `unset`, which the controller reads as unset, and `api`, the value the kind's CRD
    /// schema defaults the field to before admission (Volcano's `maxRetry`: 0 is unset, and the
    /// CRD writes 3 where the user wrote none), replaced unless the user wrote it.
    ValueOrApiDefault { unset: i64, api: i64 },
    /// This text, which pod defaulting fills in and the kind does not allow (`Always`).
    Text(&'static str),
}

/// A run-level field the queue's job defaults write when it is unset.
#[derive(Debug)]
pub struct RunDefault {
    pub setting: Setting,
    /// The field, from the object's root.
    pub at: &'static [&'static str],
    /// What counts as unset, besides absent or null.
    pub replaces: Replaces,
    /// The field's map may be created (a PyTorchJob's `runPolicy`); else it must exist.
    pub make: bool,
    /// Written only when this holds of the object (a RayJob's TTL applies only with
    /// `shutdownAfterJobFinishes`).
    pub when: Option<Cond>,
    /// Never written when this holds of the object (a Job with `backoffLimitPerIndex`).
    pub unless: Option<Cond>,
    /// A field users write by mistake for this one, which the controller never reads (a
    /// PyTorchJob's spec-level `ttlSecondsAfterFinished`): its value is honoured here, with a
    /// warning.
    pub misplaced: Option<&'static [&'static str]>,
}

/// How often a run starts over, each time with a fresh deadline.
#[derive(Debug)]
pub struct Restarts {
    /// The field, from the object's root, and its dotted form.
    pub at: &'static [&'static str],
    pub dotted: &'static str,
    /// The count when the field is absent (or 0, with `zero_is_default`), and what to call it.
    pub default: i64,
    pub zero_is_default: bool,
    pub default_is: &'static str,
    /// A field of each holder that can raise the count for its pods (a Volcano task's own
    /// `maxRetry`).
    pub per_holder: Option<&'static str>,
    /// Rules of the object that restart the run without counting against `at`.
    pub uncounted: Option<Uncounted>,
}

/// Rules that restart a run without counting (a JobSet's failure-policy actions
/// `…AndIgnoreMaxRestarts`): one of them leaves the run unbounded.
#[derive(Debug)]
pub struct Uncounted {
    /// The list of rules, from the object's root, and its dotted form.
    pub rules: &'static [&'static str],
    pub dotted: &'static str,
    /// The field of a rule that names its action, and the end of the actions that restart
    /// without counting.
    pub action: &'static str,
    pub suffix: &'static str,
    /// What bounds the run instead.
    pub set: &'static str,
}

/// Where a kind keeps the deadline that bounds a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// The run's own deadline: (JSON Pointer of the holder, key, dotted path). A batch/v1 Job's
    /// `spec.activeDeadlineSeconds` counts from the Job's start across every wave and retry of
    /// its pods; a PyTorchJob's `spec.runPolicy.activeDeadlineSeconds`, a TrainJob's
    /// `spec.activeDeadlineSeconds` likewise; a bare Pod's is its own.
    Run(&'static str, &'static str, &'static str),
    /// A JobSet has none: each replicated Job's own `template.spec.activeDeadlineSeconds`, and
    /// the JobSet runs its Jobs again up to `failurePolicy.maxRestarts` times. (The default
    /// also goes to each of its pod templates that sets none.)
    EachJob,
    /// A Volcano Job has none (nor a Job-level one): each task's pod template
    /// `activeDeadlineSeconds`, and Volcano restarts up to `maxRetry` times.
    EachPod,
    /// The kind has no run-level bound at all (a RayCluster runs until it is deleted): `why`,
    /// and `set`, what to use instead. Nothing is written; the GPU-hour ceiling judges it
    /// unbounded.
    Never {
        why: &'static str,
        set: &'static str,
    },
}

impl Deadline {
    /// `spec.activeDeadlineSeconds`: a Job's, a Pod's, a RayJob's.
    pub const SPEC: Deadline = Deadline::Run(
        "/spec",
        "activeDeadlineSeconds",
        "spec.activeDeadlineSeconds",
    );
    /// `spec.runPolicy.activeDeadlineSeconds`: the Kubeflow operators' (a PyTorchJob's, an
    /// MPIJob's).
    pub const RUN_POLICY: Deadline = Deadline::Run(
        "/spec/runPolicy",
        "activeDeadlineSeconds",
        "spec.runPolicy.activeDeadlineSeconds",
    );
}

/// Something a kind's controller makes (pods, or a child workload), and how it proves whose it
/// is: the label (or annotation) the controller writes on it, equal to a field of the owner
/// reference.
#[derive(Debug)]
pub struct Makes {
    /// The [`KindSpec::name`] of what it makes.
    pub kind: &'static str,
    /// The keys, any of which carries the mark ([`OWN_NAME`] stands for the made object's own
    /// name).
    pub mark: &'static [&'static str],
    /// The owner's field the mark equals: `uid` or `name` (of the owner reference, for a
    /// [`Through::Direct`] maker).
    pub of: &'static str,
    /// Whether the kind's controller makes it itself or through an intermediate owner.
    pub through: Through,
}

/// How a kind's controller makes something.
#[derive(Debug, Clone, Copy)]
pub enum Through {
    /// It creates the object itself: the object's controller owner reference is the owner, and
    /// the request comes from the owner kind's controller (`match.podCreators`).
    Direct,
    /// It creates an [`Intermediate`] owner carrying the mark in its pod template (a
    /// LeaderWorkerSet's StatefulSets), and that owner's controller makes the pods from it: a
    /// pod is the owner kind's when that controller sends it from such an owner with the mark,
    /// and launchgate lets only the owner kind's controller create or change an intermediate
    /// that carries the mark.
    Owner(&'static Intermediate),
}

/// An owner between a launch kind and its pods that is no launch kind: a built-in workload
/// whose controller makes pods from its pod template, copying the template's labels and
/// annotations (the marks) onto each.
#[derive(Debug)]
pub struct Intermediate {
    /// Its `kind`.
    pub kind: &'static str,
    /// Its API group.
    pub group: &'static str,
    /// Its API version.
    pub version: &'static str,
    /// Its resource (plural).
    pub resource: &'static str,
    /// Where its pod template is.
    pub template: &'static [&'static str],
    /// The identities its controller runs as: kube-controller-manager's, which no tenant can
    /// take.
    pub controller: &'static [&'static str],
}

impl Intermediate {
    /// Every intermediate owner a registered kind's controller makes pods through, once each.
    pub fn all() -> impl Iterator<Item = &'static Intermediate> {
        let mut seen: Vec<&'static Intermediate> = Vec::new();
        for m in all().flat_map(|k| k.makes) {
            if let Through::Owner(via) = m.through
                && !seen.iter().any(|s| std::ptr::eq(*s, via))
            {
                seen.push(via);
            }
        }
        seen.into_iter()
    }

    /// The intermediate owner of API group `group` and kind `kind`, if one is.
    pub fn of(group: &str, kind: &str) -> Option<&'static Intermediate> {
        Self::all().find(|i| i.group == group && i.kind == kind)
    }

    /// Its `apiVersion`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

/// apps/v1 StatefulSet: the StatefulSet controller makes its pods.
pub static STATEFUL_SET: Intermediate = Intermediate {
    kind: "StatefulSet",
    group: "apps",
    version: "v1",
    resource: "statefulsets",
    template: &["spec", "template"],
    // kube-controller-manager with --use-service-account-credentials (kubeadm, most
    // distributions), and without it.
    controller: &[
        "system:serviceaccount:kube-system:statefulset-controller",
        "system:kube-controller-manager",
    ],
};

/// Stands for the made object's own `metadata.name` in a [`Makes::mark`].
pub const OWN_NAME: &str = "metadata.name";

/// How Kueue manages a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kueue {
    /// Kueue's integration for this kind admits it by the suspend field at this path
    /// (`spec.suspend`: batch/v1 Job, JobSet, TrainJob, RayJob, RayCluster;
    /// `spec.runPolicy.suspend`: PyTorchJob, MPIJob). launchgate never writes it.
    Suspends(&'static str),
    /// Kueue's integration for this kind admits it by its labels alone, holding the pods its
    /// controllers make by scheduling gates until it is admitted: the kind has no suspend field
    /// (a LeaderWorkerSet).
    Gates,
    /// Kueue manages it as a plain pod (its pod integration, by scheduling gate).
    Pod,
    /// Kueue does not manage this kind (why, for the warning).
    No(&'static str),
}

impl Kueue {
    /// Kueue's integration for the kind reads the workload's labels: it admits it by a suspend
    /// field, or by scheduling gates on its pods.
    pub fn by_labels(self) -> bool {
        matches!(self, Kueue::Suspends(_) | Kueue::Gates)
    }

    /// Kueue's pod integration manages the kind (a plain pod, by scheduling gate).
    pub fn as_pod(self) -> bool {
        self == Kueue::Pod
    }
}

/// A workload kind: a handle on its descriptor.
#[derive(Clone, Copy)]
pub struct WorkloadKind(&'static KindSpec);

#[allow(non_upper_case_globals)]
impl WorkloadKind {
    /// core/v1 Pod
    pub const Pod: WorkloadKind = WorkloadKind(&pod::POD);
    /// batch/v1 Job
    pub const BatchJob: WorkloadKind = WorkloadKind(&job::JOB);
    /// batch.volcano.sh/v1alpha1 Job
    pub const VolcanoJob: WorkloadKind = WorkloadKind(&volcano::VOLCANO_JOB);
    /// kubeflow.org/v1 PyTorchJob (legacy: training-operator v1)
    pub const PyTorchJob: WorkloadKind = WorkloadKind(&pytorchjob::PYTORCH_JOB);
    /// jobset.x-k8s.io/v1alpha2 JobSet
    pub const JobSet: WorkloadKind = WorkloadKind(&jobset::JOBSET);
    /// trainer.kubeflow.org/v1alpha1 TrainJob (Kubeflow Trainer v2)
    pub const TrainJob: WorkloadKind = WorkloadKind(&trainjob::TRAIN_JOB);
}

#[cfg(test)]
impl WorkloadKind {
    /// A handle on a descriptor that is not one of [`ALL`], for the tests of what reads
    /// descriptors.
    pub(crate) fn of_spec(spec: &'static KindSpec) -> Self {
        WorkloadKind(spec)
    }
}

impl PartialEq for WorkloadKind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for WorkloadKind {}

impl Hash for WorkloadKind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}

impl fmt::Debug for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl WorkloadKind {
    /// Every kind, in [`FILES`]' order.
    pub fn all() -> impl Iterator<Item = WorkloadKind> {
        all().map(WorkloadKind)
    }

    /// The kind's descriptor.
    pub fn spec(self) -> &'static KindSpec {
        self.0
    }

    /// Recognises a kind from the admission request's group/version/kind.
    pub fn from_gvk(group: &str, version: &str, kind: &str) -> Option<Self> {
        Self::all().find(|k| k.0.group == group && k.0.version == version && k.0.kind == kind)
    }

    /// The kind W&B Launch makes of a queue template that names no kind
    /// ([`KindSpec::launch_default`]).
    pub fn launch_default() -> WorkloadKind {
        Self::all()
            .find(|k| k.0.launch_default)
            .expect("one registered kind is W&B Launch's default")
    }

    /// The kind whose scale subresource is `<resource>/scale` of API group `group`.
    pub fn scaled_through(group: &str, resource: &str) -> Option<Self> {
        Self::all().find(|k| k.0.scale.is_some() && k.0.group == group && k.0.resource == resource)
    }

    /// A handle on a descriptor that is not registered in [`ALL`] (unit tests of what reads
    /// descriptors).
    #[cfg(test)]
    pub(crate) fn unregistered(spec: &'static KindSpec) -> Self {
        WorkloadKind(spec)
    }

    /// Recognises a kind by its [`KindSpec::name`].
    pub fn named(name: &str) -> Option<Self> {
        Self::all().find(|k| k.0.name == name)
    }

    /// Recognises a kind from an object's `apiVersion` and `kind`.
    pub fn of_object(object: &Value) -> Option<Self> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Self::from_gvk(group, version, kind)
    }

    /// A short stable name (used in metrics and messages).
    pub fn as_str(self) -> &'static str {
        self.0.name
    }

    /// The kind's API group, version and resource (plural), as admission rules name them.
    pub fn api_resource(self) -> (&'static str, &'static str, &'static str) {
        (self.0.group, self.0.version, self.0.resource)
    }

    /// The object's `kind` (a Volcano Job is a `Job` of its own group).
    pub fn api_kind(self) -> &'static str {
        self.0.kind
    }

    /// The object's `apiVersion` (`batch/v1`, `v1`).
    pub fn api_version(self) -> String {
        match self.0.group {
            "" => self.0.version.to_string(),
            group => format!("{group}/{}", self.0.version),
        }
    }

    /// The kind's API group (`""` for core).
    pub fn api_group(self) -> &'static str {
        self.0.group
    }

    /// The CEL test, in an admission policy or a webhook's `matchConditions`, for "the request
    /// is for this kind": its API group, and its `kind` too where another kind shares the
    /// group.
    pub fn cel_test(self) -> String {
        self.cel_test_among(&all().collect::<Vec<_>>())
    }

    /// [`WorkloadKind::cel_test`] among `kinds`.
    fn cel_test_among(self, kinds: &[&KindSpec]) -> String {
        let group = format!("request.kind.group == {}", crate::cel::lit(self.0.group));
        if kinds
            .iter()
            .any(|k| k.name != self.0.name && k.group == self.0.group)
        {
            format!(
                "({group} && request.kind.kind == {})",
                crate::cel::lit(self.0.kind)
            )
        } else {
            group
        }
    }

    /// True for the kinds that own pod templates (everything but a Pod).
    pub fn is_job(self) -> bool {
        !matches!(
            self.0.positions,
            [Position {
                holders: Holders::Root,
                ..
            }]
        )
    }

    /// True for a bare Pod: the object is its own pod template.
    pub fn is_pod(self) -> bool {
        !self.is_job()
    }

    /// For a kind whose pods come from a runtime it names ([`KindSpec::runtime`]), the
    /// workload kind its controller renders the runtime into (a TrainJob's JobSet).
    pub fn runs_as(self) -> Option<WorkloadKind> {
        self.0.runtime?;
        self.0.makes.iter().find_map(|m| Self::named(m.kind))
    }

    /// Its scale subresource as admission rules and RBAC name it (`<resource>/scale`), if it
    /// has one ([`KindSpec::scale`]).
    pub fn scale_resource(self) -> Option<String> {
        self.0
            .scale
            .as_ref()
            .map(|_| format!("{}/{SCALE_SUBRESOURCE}", self.0.resource))
    }

    /// The kinds whose controller makes objects of this kind itself ([`Through::Direct`]).
    pub fn made_by(self) -> impl Iterator<Item = WorkloadKind> {
        Self::all().filter(move |&owner| self.mark_from(owner).is_some())
    }

    /// How `owner`'s controller marks what it makes of this kind itself.
    pub fn mark_from(self, owner: WorkloadKind) -> Option<&'static Makes> {
        owner
            .0
            .makes
            .iter()
            .find(|m| m.kind == self.0.name && matches!(m.through, Through::Direct))
    }

    /// The kinds whose controller makes objects of this kind through an intermediate owner,
    /// each with how ([`Through::Owner`]).
    pub fn made_through(
        self,
    ) -> impl Iterator<Item = (WorkloadKind, &'static Makes, &'static Intermediate)> {
        Self::all().flat_map(move |owner| {
            owner.0.makes.iter().filter_map(move |m| match m.through {
                Through::Owner(via) if m.kind == self.0.name => Some((owner, m, via)),
                _ => None,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What changes a guarantee has no default: a descriptor that takes its run or its Kueue
    /// integration from the base is refused (at compile time, for a registered one); every
    /// registered one states them.
    #[test]
    fn a_descriptor_states_its_run_and_its_kueue_integration() {
        for k in all() {
            assert_eq!(unstated(k), None, "{}", k.name);
        }
        let identity = KindSpec {
            name: "X",
            group: "example.com",
            version: "v1",
            kind: "X",
            resource: "xs",
            webhook_rule: "x",
            ..KindSpec::BASE
        };
        assert!(unstated(&identity).unwrap().contains("deadline"));
        let bounded = KindSpec {
            run: Run {
                deadline: Deadline::SPEC,
                ..Run::UNSTATED
            },
            ..identity
        };
        assert!(unstated(&bounded).unwrap().contains("ends its run"));
        let ending = KindSpec {
            run: Run {
                deadline: Deadline::SPEC,
                ends: Ends::WithRun,
                ..Run::UNSTATED
            },
            ..bounded
        };
        assert!(unstated(&ending).unwrap().contains("Kueue"));
        let stated = KindSpec {
            kueue: Kueue::Gates,
            ..ending
        };
        assert_eq!(unstated(&stated), None);
    }

    #[test]
    fn names_and_coordinates_are_unique() {
        assert_eq!(all().filter(|k| k.launch_default).count(), 1);
        assert_eq!(WorkloadKind::launch_default(), WorkloadKind::BatchJob);
        let mut names: Vec<_> = all().map(|k| k.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all().count());
        let mut gvk: Vec<_> = all().map(|k| (k.group, k.version, k.kind)).collect();
        gvk.sort();
        gvk.dedup();
        assert_eq!(gvk.len(), all().count());
        for k in all() {
            for m in k.makes {
                assert!(
                    WorkloadKind::named(m.kind).is_some(),
                    "{} makes an unknown kind {}",
                    k.name,
                    m.kind
                );
            }
        }
    }

    #[test]
    fn kinds_are_recognised() {
        assert_eq!(
            WorkloadKind::from_gvk("", "v1", "Pod"),
            Some(WorkloadKind::Pod)
        );
        assert_eq!(
            WorkloadKind::from_gvk("batch.volcano.sh", "v1alpha1", "Job"),
            Some(WorkloadKind::VolcanoJob)
        );
        assert_eq!(WorkloadKind::from_gvk("apps", "v1", "Deployment"), None);
        assert_eq!(
            WorkloadKind::of_object(&json!({"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob"})),
            Some(WorkloadKind::PyTorchJob)
        );
        assert_eq!(WorkloadKind::BatchJob.api_version(), "batch/v1");
        assert_eq!(WorkloadKind::Pod.api_version(), "v1");
        assert!(WorkloadKind::Pod.is_pod() && WorkloadKind::JobSet.is_job());
    }

    /// A kind is told by its group, and by its `kind` too where another kind shares the
    /// group (KubeRay's RayJob and RayCluster are both `ray.io`).
    #[test]
    fn a_shared_group_is_told_apart_by_kind() {
        const fn spec(name: &'static str, kind: &'static str) -> KindSpec {
            KindSpec {
                name,
                group: "ray.example.com",
                version: "v1",
                kind,
                resource: "",
                run: Run {
                    deadline: Deadline::EachPod,
                    ends: Ends::WithRun,
                    ..Run::UNSTATED
                },
                webhook_rule: name,
                ..KindSpec::BASE
            }
        }
        static JOB: KindSpec = spec("TestRayJob", "RayJob");
        static CLUSTER: KindSpec = spec("TestRayCluster", "RayCluster");
        let job = WorkloadKind::of_spec(&JOB);
        assert_eq!(
            job.cel_test_among(&[&JOB]),
            "request.kind.group == 'ray.example.com'"
        );
        assert_eq!(
            job.cel_test_among(&[&JOB, &CLUSTER, &pod::POD]),
            "(request.kind.group == 'ray.example.com' && request.kind.kind == 'RayJob')"
        );
        assert_eq!(
            WorkloadKind::VolcanoJob.cel_test(),
            "request.kind.group == 'batch.volcano.sh'"
        );
    }

    /// Every kind says what ends its resources, coherently with its deadline; a field that must
    /// be `true` for them to end with the run is written by a run default, before every default
    /// it gates, and such a default is written nowhere else.
    #[test]
    fn what_ends_a_runs_resources_is_stated_and_written_first() {
        for k in all() {
            assert_eq!(
                matches!(k.run.ends, Ends::Never),
                matches!(k.run.deadline, Deadline::Never { .. }),
                "{}: a kind that runs until deleted has no deadline, and only it",
                k.name
            );
            let ends_at = match &k.run.ends {
                Ends::When { cond, .. } if cond.written().is_some() => cond.field_written(),
                _ => None,
            };
            let writes: Vec<usize> = k
                .run
                .defaults
                .iter()
                .enumerate()
                .filter(|(_, d)| d.setting == Setting::EndWithRun)
                .map(|(i, _)| i)
                .collect();
            let Some(at) = ends_at else {
                assert!(writes.is_empty(), "{}", k.name);
                continue;
            };
            assert_eq!(writes.len(), 1, "{}", k.name);
            let first = &k.run.defaults[writes[0]];
            assert_eq!((first.at, first.replaces), (at, Replaces::Absent));
            for (i, d) in k.run.defaults.iter().enumerate() {
                if let Some(Cond::True { at: gate, .. }) = &d.when
                    && *gate == at
                {
                    assert!(
                        i > writes[0],
                        "{}: {:?} is gated before it is written",
                        k.name,
                        d.at
                    );
                }
            }
        }
        let ray = WorkloadKind::named("RayJob").unwrap().spec();
        let unset = json!({"spec": {}});
        let (unmet, _, set) = ray.run.ends.outlives(&unset).unwrap();
        assert_eq!(
            (unmet.as_str(), set.as_str()),
            (
                "spec.shutdownAfterJobFinishes is not true",
                "spec.shutdownAfterJobFinishes: true"
            )
        );
        let off = json!({"spec": {"shutdownAfterJobFinishes": false}});
        assert!(ray.run.ends.outlives(&off).is_some());
        let on = json!({"spec": {"shutdownAfterJobFinishes": true}});
        assert!(ray.run.ends.outlives(&on).is_none());
        assert!(
            WorkloadKind::BatchJob
                .spec()
                .run
                .ends
                .outlives(&off)
                .is_none()
        );
    }

    #[test]
    fn counts_evaluate_as_written() {
        static PAR: Num = Num::holder(&["parallelism"], 1);
        static COMP: Num = Num::holder(&["completions"], i64::MAX);
        static AT_ONCE: Num = Num::Min(&PAR, &COMP);
        let h = json!({"parallelism": 4, "completions": 2});
        assert_eq!(AT_ONCE.eval(&json!({}), &h, None), 2);
        assert_eq!(AT_ONCE.eval(&json!({}), &json!({}), None), 1);
        static ELASTIC: Num = Num::If {
            when: Cond::KeyIs("worker"),
            then: &Num::Lit(8),
            otherwise: &Num::Lit(1),
        };
        assert_eq!(ELASTIC.eval(&json!({}), &h, Some("Worker")), 8);
        assert_eq!(ELASTIC.eval(&json!({}), &h, Some("Master")), 1);
        static SIZE: Num = Num::holder(&["size"], 1);
        static FOLLOWERS: Num = Num::Sub(&SIZE, &Num::Lit(1));
        static WITH_SURGE: Num = Num::Add(&SIZE, &Num::Lit(2));
        assert_eq!(WITH_SURGE.eval(&json!({}), &json!({"size": 4}), None), 6);
        assert_eq!(
            WITH_SURGE.eval(&json!({}), &json!({"size": i64::MAX}), None),
            i64::MAX
        );
        assert_eq!(FOLLOWERS.eval(&json!({}), &json!({"size": 4}), None), 3);
        assert_eq!(FOLLOWERS.eval(&json!({}), &json!({}), None), 0);
        assert_eq!(
            FOLLOWERS.eval(&json!({}), &json!({"size": i64::MIN}), None),
            i64::MIN
        );
    }
}
