//! The policy: configuration model, loading, checking and queue resolution.
//!
//! A config file is parsed once (unknown keys and bad values are rejected with the path of the
//! offending key), checked, compiled into a [`Policy`] and then shared read-only.

pub(crate) mod exemption;
mod json_schema;
pub mod launchqueue;
mod owner;
mod resolve;

pub use exemption::{EXEMPTED_BY_ANNOTATION, Exemption, Requester};
pub(crate) use owner::{OWN_NAME, owner_mark};
pub use owner::{
    OwnerClaim, TENANT_HELD_NAMESPACES, TrustedBecause, TrustedCreators, intermediate_guard,
    is_workload_updater, owner_claim,
};

pub use json_schema::{REGENERATE_HINT, chart_values_schema, config_json_schema};
pub(crate) use resolve::{QueueResolution, WorkloadMatch};

pub use crate::error::{ConfigError, ConfigErrors};
use crate::mutate::labels::queue_label_value;
use crate::mutate::{
    cache::CacheConfig, job_defaults::JobDefaultsConfig, security_context::SecurityContextConfig,
};
use crate::pytorch::PytorchConfig;
use crate::validate::{LimitsConfig, QueueLimits};
use crate::workload::consumption::{Accelerators, AcceleratorsConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The built-in example policy (the W&B docs' minikube GPU queue), as YAML.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("default-config.yaml");

/// The sha256 (hex) of a config file's bytes, as `sha256sum` prints it: the
/// `launchgate_config_info{hash}` label, so every pod's policy can be compared with the file.
pub fn config_hash(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The whole config file.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Config {
    #[serde(rename = "match")]
    /// Which objects are launch workloads and how their queue is named (`match`).
    pub match_rules: MatchRules,
    /// Queue for workloads that name none, or name an unconfigured one.
    pub default_queue: Option<String>,
    /// Per-namespace default queues (checked before `defaultQueue`).
    pub namespace_queues: BTreeMap<String, String>,
    /// The queues, by name (`name` or `entity/name`).
    pub queues: BTreeMap<String, QueueConfig>,
    /// How many GPUs each way of asking for an accelerator counts as — an extended resource
    /// name, a MIG profile, a DRA DeviceClass — for every limit, total and GPU-hour ceiling on
    /// a whole GPU (`nvidia.com/gpu`).
    pub accelerators: AcceleratorsConfig,
    /// Where your copy of launchgate's documentation site is served (`https://…`, the
    /// directory holding its `index.html`). A denial's message then ends with a link to the
    /// section of each rule it names (`<docsUrl>/reference/rules.html#limits-variables`), so
    /// the person refused reads what the rule means and what to do. Unset, messages carry no
    /// link.
    pub docs_url: Option<String>,
}

/// Which objects are launch workloads and how their queue is named.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct MatchRules {
    /// Labels (any one, any value) that mark a launch workload.
    pub launch_labels: Vec<String>,
    /// Labels naming the workload's queue, in the order they are read; each also marks a
    /// launch workload, as a launch label does (`launchgate.io/queue`).
    pub queue_labels: Vec<String>,
    /// Labels that name the queue of a workload something else already marks as a launch
    /// workload (a launch label or a queue label), read after `queueLabels`; they never make
    /// one. A label as common as `queue` belongs here: any team's Job may carry it.
    pub queue_name_labels: Vec<String>,
    /// Container env var naming the queue (set by the W&B Launch agent).
    pub queue_env: Option<String>,
    /// Container env var naming the queue's W&B entity (set by the W&B Launch agent); a
    /// queue configured as `entity/name` is chosen over one configured as `name`.
    pub queue_entity_env: Option<String>,
    /// Requests launchgate leaves alone, decided by who sends them and where (labels only
    /// narrow an exemption down); every queue's own `exemptions` are checked after these.
    pub exemptions: Vec<Exemption>,
    /// The removed label-only exclusion: reported as a config error that shows the new form.
    #[serde(rename = "excludeLabels", skip_serializing)]
    #[schemars(skip)]
    pub exclude_labels: Option<serde_json::Value>,
    /// Container names that are sidecars, never the training container.
    pub sidecar_containers: Vec<String>,
    /// Who creates the pods of each workload kind (`Job`, `VolcanoJob`, `PyTorchJob`: the
    /// usernames the controllers run as; `*` and `?` are wildcards). A pod naming such an
    /// owner as its controller is judged as that workload's pod only when one of these sends
    /// it. A kind left out keeps the identities its upstream controller runs as, where it has
    /// one no tenant can take (KubeRay's `RayJob` and `RayCluster` have none: name your
    /// operator's); `[]` trusts no one for it. `check-config` prints who is trusted and why.
    #[schemars(default = "owner::default_pod_creators")]
    pub pod_creators: BTreeMap<String, Vec<String>>,
    /// Controllers that update launch workloads they did not create (the usernames they run
    /// as; `*` and `?` are wildcards): Kueue, which admits a run by an UPDATE. Their UPDATE of
    /// an exempt workload is judged against what its exemption admitted; an UPDATE of an
    /// exempt workload by anyone else no exemption covers is judged as that requester's
    /// CREATE. A workload's own controller (`podCreators`) updating what it made counts too.
    pub workload_updaters: Vec<String>,
}

/// The kaniko executor image the W&B agent builds with, by tag or digest.
const KANIKO_EXECUTOR_IMAGES: [&str; 2] = [
    "gcr.io/kaniko-project/executor:*",
    "gcr.io/kaniko-project/executor@*",
];

impl Default for MatchRules {
    fn default() -> Self {
        MatchRules {
            launch_labels: vec!["wandb.ai/monitor".into(), "wandb.ai/agent".into()],
            queue_labels: vec![crate::mutate::labels::QUEUE_LABEL.into()],
            queue_name_labels: vec!["queue".into()],
            queue_env: Some("WANDB_LAUNCH_QUEUE_NAME".into()),
            queue_entity_env: Some("WANDB_LAUNCH_QUEUE_ENTITY".into()),
            exemptions: vec![Exemption {
                name: "wandb-image-builds".into(),
                labels: BTreeMap::from([("wandb".into(), "launch".into())]),
                images: KANIKO_EXECUTOR_IMAGES
                    .iter()
                    .map(|i| i.to_string())
                    .collect(),
                service_accounts: vec!["wandb/wandb-launch-serviceaccount-*".into()],
                ..Exemption::default()
            }],
            exclude_labels: None,
            // Filled in when the config is loaded (`owner::complete_pod_creators`), which
            // remembers which kinds the config named.
            pod_creators: BTreeMap::new(),
            workload_updaters: owner::default_workload_updaters(),
            sidecar_containers: vec!["istio-proxy".into(), "linkerd-proxy".into()],
        }
    }
}

impl MatchRules {
    /// The labels that make an object (or one of its pod templates) a launch workload: the
    /// launch labels and the queue labels — never `queueNameLabels`. The webhook's matching
    /// (`Policy::classify`), the registration's `matchConditions` and the native policies'
    /// (`native::select::is_launch`) all read this.
    pub fn marking_labels(&self) -> impl Iterator<Item = &String> {
        self.launch_labels.iter().chain(&self.queue_labels)
    }

    /// The labels that name a launch workload's queue, in the order they are read: the queue
    /// labels, then the labels that only name it.
    pub fn naming_labels(&self) -> impl Iterator<Item = &String> {
        self.queue_labels.iter().chain(&self.queue_name_labels)
    }

    /// Every label whose change can change whether an object is a launch workload or its
    /// queue (what an UPDATE must be sent for), in order, without repeats.
    pub fn deciding_labels(&self) -> Vec<&String> {
        let mut out: Vec<&String> = Vec::new();
        for key in self.marking_labels().chain(&self.queue_name_labels) {
            if !out.contains(&key) {
                out.push(key);
            }
        }
        out
    }

    /// Warnings about queue labels so common that any team's object may carry them: a queue
    /// label marks a launch workload, so one without a prefix (`queue`, `team`) would make
    /// every object labelled with it launchgate's — mutated, limited, deleted after its TTL.
    fn check_generic_queue_labels(&self, warnings: &mut Vec<ConfigError>) {
        for (i, key) in self.queue_labels.iter().enumerate() {
            if !key.contains('/') && !self.launch_labels.contains(key) {
                warnings.push(ConfigError::new(
                    format!("match.queueLabels[{i}]"),
                    format!(
                        "{key:?} has no prefix, so objects launchgate was never meant for carry it, and a queue label marks a launch workload: every Job labelled {key}: <anything> would be mutated and limited; list it under match.queueNameLabels, which only names the queue of a workload a launch label marks"
                    ),
                ));
            }
        }
    }
}

/// The chart's `files/match-labels.json`: the default `match` label lists, which the chart's
/// webhook `matchConditions` read where its `config.match` leaves one out.
pub fn chart_match_labels() -> serde_json::Value {
    let defaults = MatchRules::default();
    serde_json::json!({
        "launchLabels": defaults.launch_labels,
        "queueLabels": defaults.queue_labels,
        "queueNameLabels": defaults.queue_name_labels,
    })
}

/// Everything configured for one queue.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct QueueConfig {
    /// Safe container and pod security defaults.
    pub security_context: SecurityContextConfig,
    /// batch/v1 and Volcano Job retry and cleanup defaults.
    pub job_defaults: JobDefaultsConfig,
    /// The shared NFS or PVC cache, when configured.
    pub cache: Option<CacheConfig>,
    /// PyTorch distributed wiring.
    pub pytorch: PytorchConfig,
    /// Launch guardrails: whole gangs, preemption, rank 0, /dev/shm, a cost ceiling.
    pub guardrails: crate::topology::guardrails::GuardrailsConfig,
    /// The Kueue LocalQueue, priority class and run-time bound this queue's runs get.
    pub kueue: Option<crate::mutate::kueue::KueueConfig>,
    /// No GPU by environment: `NVIDIA_VISIBLE_DEVICES=void` in every container that asks for
    /// no GPU, and a tenant's own value of the variable denied.
    pub visible_devices: crate::mutate::visible_devices::VisibleDevicesConfig,
    /// The queue's W&B template limits.
    pub limits: LimitsConfig,
    /// Requests of this queue launchgate leaves alone (after `match.exemptions`).
    pub exemptions: Vec<Exemption>,
}

/// A configured queue, compiled.
#[derive(Debug)]
pub struct Queue {
    /// The W&B queue name (the config key without its `entity/`), as workloads name it in
    /// their queue label and `WANDB_LAUNCH_QUEUE_NAME`.
    pub name: String,
    /// The W&B entity, for a queue configured as `entity/name`.
    pub entity: Option<String>,
    /// The config key (`gpu-queue` or `acme/gpu-queue`).
    pub key: String,
    /// The queue's configuration as written.
    pub config: QueueConfig,
    /// Its limits, compiled.
    pub limits: QueueLimits,
    /// How GPUs are counted (`accelerators`, the same for every queue).
    pub accelerators: Arc<Accelerators>,
}

impl Queue {
    /// The settings that bound a run's size (`totals`, the GPU-hour ceiling), by config key: a
    /// TrainJob that leaves its size to a runtime launchgate cannot read is judged by
    /// `limits.unverifiableRuntime` where there is one.
    pub fn size_bounds(&self) -> Vec<&'static str> {
        [
            self.limits.has_totals().then_some("totals"),
            self.config
                .guardrails
                .cost_ceiling
                .max_gpu_hours
                .is_some()
                .then_some("guardrails.costCeiling.maxGpuHours"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// True when the queue's settings make `rule` deny there ([`crate::rules::Denies`]);
    /// `global_exemptions`: whether `match.exemptions` lists any.
    fn denies_by(&self, rule: &crate::rules::Rule, global_exemptions: bool) -> bool {
        use crate::rules::Denies;
        use crate::topology::guardrails::{GangAction, GuardrailEnforcement};
        let c = &self.config;
        let limits = self.limits.enforcement() == crate::validate::Enforcement::Deny;
        let sized = !self.size_bounds().is_empty();
        match rule.denies {
            Denies::LimitsEnforcement => limits,
            Denies::TrainingRuntimes => {
                limits
                    && sized
                    && self.limits.training_runtimes()
                        == crate::validate::TrainingRuntimes::ClusterOnly
            }
            Denies::UnverifiableRuntime => {
                sized
                    && self.limits.unverifiable_runtime()
                        == crate::validate::UnverifiableRuntime::Deny
            }
            Denies::Kueue => limits && c.kueue.is_some(),
            Denies::VisibleDevices => limits && c.visible_devices.enabled,
            Denies::GpuLimits => limits && self.limits.limits_gpus(),
            Denies::Gang => c.guardrails.gang == GangAction::Deny,
            Denies::CostCeiling => {
                let cost = &c.guardrails.cost_ceiling;
                cost.max_gpu_hours.is_some() && cost.enforcement == GuardrailEnforcement::Deny
            }
            Denies::PytorchUnwirable => {
                c.pytorch.enabled && c.pytorch.on_unwirable == crate::pytorch::OnUnwirable::Deny
            }
            // What a pod of this queue inherits: `match.exemptions` and the queue's own.
            Denies::Exemptions => global_exemptions || !c.exemptions.is_empty(),
            Denies::Never => false,
        }
    }

    /// The queue's settings for the mutators.
    pub fn mutation_settings(&self) -> crate::mutate::Settings<'_> {
        crate::mutate::Settings {
            security_context: &self.config.security_context,
            job_defaults: &self.config.job_defaults,
            cache: self.config.cache.as_ref(),
            pytorch: &self.config.pytorch,
            kueue: self.config.kueue.as_ref(),
            guardrails: &self.config.guardrails,
            visible_devices: &self.config.visible_devices,
            accelerators: &self.accelerators,
        }
    }
}

/// The loaded, checked policy. Shared read-only (`Arc`) and swapped whole on reload.
#[derive(Debug)]
pub struct Policy {
    /// The configuration as loaded.
    pub config: Config,
    /// The configured queues, by config key.
    pub queues: BTreeMap<String, Queue>,
    /// What loads but does not hold as written (a cap on `resources.limits` alone, a controller
    /// identity in a namespace tenants hold): printed
    /// by `check-config` and logged when the webhook loads the config.
    pub warnings: Vec<ConfigError>,
    /// Who is trusted to make each owner kind's pods and child workloads
    /// (`match.podCreators`), and why: printed by `check-config`.
    pub trusted_creators: Vec<TrustedCreators>,
}

impl Policy {
    /// The rules ([`crate::rules::RULES`]) that deny in `queue`, by what each rule's
    /// [`crate::rules::Denies`] reads of its settings: every denial the validating webhook can
    /// give there. A queue with any is served by the fail-closed webhook
    /// ([`Policy::fails_closed`]), so an outage never admits what launchgate would deny.
    pub fn deny_rules(&self, queue: &Queue) -> Vec<&'static crate::rules::Rule> {
        let global_exemptions = !self.config.match_rules.exemptions.is_empty();
        crate::rules::RULES
            .iter()
            .copied()
            .filter(|r| queue.denies_by(r, global_exemptions))
            .collect()
    }

    /// True when some rule denies in `queue` ([`Policy::deny_rules`]) in a way that makes it
    /// fail closed ([`crate::rules::Denies::routes_fail_closed`]).
    pub fn fails_closed(&self, queue: &Queue) -> bool {
        self.deny_rules(queue)
            .iter()
            .any(|r| r.denies.routes_fail_closed())
    }

    /// True when any exemption is configured (`match.exemptions` or a queue's): then a mark
    /// naming one could exempt what inherits it, and a mark launchgate did not write is denied.
    pub fn exemptions_configured(&self) -> bool {
        !self.config.match_rules.exemptions.is_empty()
            || self
                .queues
                .values()
                .any(|q| !q.config.exemptions.is_empty())
    }

    /// Parses, checks and compiles a YAML (or JSON) config.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigErrors> {
        let de = serde_yaml::Deserializer::from_str(text);
        let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            // serde_yaml already prefixes some messages with the path (or, for an unknown
            // field, with the path of the mapping holding it).
            let message = match message.split_once(": ") {
                Some((prefix, rest)) if !prefix.is_empty() && path.starts_with(prefix) => {
                    rest.to_string()
                }
                _ => message,
            };
            ConfigErrors(vec![ConfigError::new(path, message)])
        })?;
        Self::from_config(config)
    }

    /// Checks and compiles a parsed config.
    pub fn from_config(mut config: Config) -> Result<Self, ConfigErrors> {
        // Where the config puts tenants: no controller identity there is trusted.
        let mut tenant_namespaces = BTreeMap::new();
        for (name, queue) in &config.queues {
            for ns in &queue.limits.allowed_namespaces {
                tenant_namespaces
                    .entry(ns.clone())
                    .or_insert_with(|| format!("queues.{name}.limits.allowedNamespaces"));
            }
        }
        for ns in config.namespace_queues.keys() {
            tenant_namespaces
                .entry(ns.clone())
                .or_insert_with(|| format!("namespaceQueues.{ns}"));
        }
        let trusted_creators =
            owner::complete_pod_creators(&mut config.match_rules.pod_creators, &tenant_namespaces);
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        let mut check_queue_ref = |path: String, name: &str| {
            if !config.queues.contains_key(name) {
                errors.push(ConfigError::new(
                    path,
                    format!("queue {name:?} is not defined under `queues`"),
                ));
            }
        };
        if let Some(name) = &config.default_queue {
            check_queue_ref("defaultQueue".into(), name);
        }
        for (ns, name) in &config.namespace_queues {
            check_queue_ref(format!("namespaceQueues.{ns}"), name);
        }
        if let Some(url) = &config.docs_url
            && let Err(why) = crate::rules::check_docs_url(url)
        {
            errors.push(ConfigError::new("docsUrl", why));
        }
        if config.match_rules.exclude_labels.is_some() {
            errors.push(ConfigError::new(
                "match.excludeLabels",
                "removed: a label alone no longer exempts an object (whoever creates it writes its labels); \
                 write `match.exemptions: [{name: image-builds, labels: {wandb: launch}, serviceAccounts: [<namespace>/<agent service account>]}]` \
                 (see docs/exemptions.md)",
            ));
        }
        exemption::check_all(
            &config.match_rules.exemptions,
            "match.exemptions",
            &mut errors,
        );
        owner::check_pod_creators(
            &config.match_rules.pod_creators,
            "match.podCreators",
            &mut errors,
        );
        owner::check_tenant_identities(
            &trusted_creators,
            &tenant_namespaces,
            "match.podCreators",
            &mut errors,
            &mut warnings,
        );
        owner::check_workload_updaters(
            &config.match_rules.workload_updaters,
            "match.workloadUpdaters",
            &mut errors,
        );
        config.match_rules.check_generic_queue_labels(&mut warnings);
        let some_exemption = config
            .match_rules
            .exemptions
            .iter()
            .chain(config.queues.values().flat_map(|q| &q.exemptions))
            .map(|e| e.name.as_str())
            .next();
        owner::check_inheritance(
            &trusted_creators,
            some_exemption,
            "match.podCreators",
            &mut errors,
        );
        let accelerators = match Accelerators::compile(&config.accelerators, "accelerators") {
            Ok(a) => Arc::new(a),
            Err(mut errs) => {
                errors.append(&mut errs);
                Arc::new(Accelerators::default())
            }
        };
        let mut queues = BTreeMap::new();
        for (name, qc) in &config.queues {
            let at = format!("queues.{name}");
            exemption::check_all(&qc.exemptions, &format!("{at}.exemptions"), &mut errors);
            qc.security_context
                .check(&format!("{at}.securityContext"), &mut errors);
            qc.job_defaults
                .check(&format!("{at}.jobDefaults"), &mut errors);
            if let Some(cache) = &qc.cache {
                cache.check(&format!("{at}.cache"), &mut errors);
            }
            qc.pytorch.check(&format!("{at}.pytorch"), &mut errors);
            qc.guardrails
                .check(&format!("{at}.guardrails"), &mut errors);
            if let Some(kueue) = &qc.kueue {
                kueue.check(&format!("{at}.kueue"), &mut errors);
            }
            let (entity, short) = match name.split_once('/') {
                Some((entity, short)) => (Some(entity.to_string()), short.to_string()),
                None => (None, name.clone()),
            };
            if name.trim().is_empty()
                || short.is_empty()
                || short.contains('/')
                || entity.as_deref().is_some_and(str::is_empty)
            {
                errors.push(ConfigError::new(
                    at.clone(),
                    "a queue is named `name` or `entity/name` (the W&B entity and queue name)",
                ));
            }
            match QueueLimits::compile(&qc.limits, &format!("{at}.limits"), &accelerators) {
                Ok(limits) => {
                    warnings.extend(limits.warnings(&format!("{at}.limits")));
                    // /dev/shm counts against the container's memory limit: a size above what
                    // the queue lets any container have could never be mounted.
                    if let (Some(shm), Some((most, source)), Some(written)) = (
                        qc.guardrails.shm_size(),
                        limits.container_ceiling("limits", "memory"),
                        qc.guardrails.shared_memory.as_ref(),
                    ) && shm > most
                    {
                        errors.push(ConfigError::new(
                            format!("{at}.guardrails.sharedMemory.sizeLimit"),
                            format!(
                                "{} is more memory than a container of this queue may have ({source}); /dev/shm counts against the memory limit, so it could never be mounted",
                                written.size_limit
                            ),
                        ));
                    }
                    queues.insert(
                        name.clone(),
                        Queue {
                            name: short,
                            entity,
                            key: name.clone(),
                            config: qc.clone(),
                            limits,
                            accelerators: accelerators.clone(),
                        },
                    );
                }
                Err(mut errs) => errors.append(&mut errs),
            }
        }
        // Two queues written as the same label value could not be told apart.
        let mut by_label = BTreeMap::new();
        for name in config.queues.keys() {
            if let Some(other) = by_label.insert(queue_label_value(name), name) {
                errors.push(ConfigError::new(
                    format!("queues.{name}"),
                    format!(
                        "queues {other:?} and {name:?} would both be labelled launchgate.io/queue={:?}; rename one",
                        queue_label_value(name)
                    ),
                ));
            }
        }
        if errors.is_empty() {
            Ok(Policy {
                config,
                queues,
                warnings,
                trusted_creators,
            })
        } else {
            Err(ConfigErrors(errors))
        }
    }

    /// The built-in example policy.
    pub fn embedded_default() -> Self {
        Self::from_yaml(DEFAULT_CONFIG_YAML).expect("the embedded default config is valid")
    }

    /// The queue configured under `name`.
    pub fn queue(&self, name: &str) -> Option<&Queue> {
        self.queues.get(name)
    }

    /// The queue called `name`, or the queue whose `launchgate.io/queue` label value is `name`
    /// (a queue name that is not a valid label value is written as a shortened, hashed value,
    /// see [`queue_label_value`]), so controller-made pods resolve to their workload's queue.
    pub fn queue_by_name_or_label(&self, name: &str) -> Option<&Queue> {
        self.queue(name).or_else(|| {
            self.queues
                .values()
                .find(|q| q.name != name && queue_label_value(&q.name) == name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_hash_is_the_sha256_of_the_bytes() {
        assert_eq!(
            config_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn embedded_default_loads() {
        let p = Policy::embedded_default();
        assert!(p.queue("gpu-queue").is_some());
        assert_eq!(p.config.default_queue.as_deref(), Some("gpu-queue"));
    }

    #[test]
    fn misspelled_key_is_named() {
        let err = Policy::from_yaml("queues:\n  q:\n    jobDefaults:\n      backofLimit: 1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("queues.q.jobDefaults.backofLimit: unknown field `backofLimit`"),
            "{err}"
        );
    }

    #[test]
    fn unknown_default_queue_is_rejected() {
        let err = Policy::from_yaml("defaultQueue: nope\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("defaultQueue") && err.contains("nope"),
            "{err}"
        );
    }

    #[test]
    fn queue_names_that_are_no_label_value_resolve_through_their_label_value() {
        let p = Policy::from_yaml("queues:\n  Team A GPU queue: {}\n  b: {}\n").unwrap();
        let label = queue_label_value("Team A GPU queue");
        assert_ne!(label, "Team A GPU queue");
        let by_label = p.queue_by_name_or_label(&label).map(|q| q.name.as_str());
        assert_eq!(by_label, Some("Team A GPU queue"));
        assert_eq!(
            p.queue_by_name_or_label("b").map(|q| q.name.as_str()),
            Some("b")
        );
        assert!(p.queue_by_name_or_label("Team-A-GPU-queue").is_none());
        // Two names written as the same label value are a config error.
        let err = Policy::from_yaml(&format!(
            "queues:\n  Team A GPU queue: {{}}\n  {label}: {{}}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("would both be labelled"), "{err}");
    }

    #[test]
    fn bad_value_type_is_named() {
        let err = Policy::from_yaml("queues:\n  q:\n    jobDefaults:\n      backoffLimit: lots\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("queues.q.jobDefaults.backoffLimit"), "{err}");
    }
}
