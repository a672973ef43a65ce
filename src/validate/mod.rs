//! Queue template limits (the validating webhook).
//!
//! A W&B launch queue is a job template with typed variables (`{{gpus}}`: integer 0..4).
//! W&B checks the bounds only for runs submitted through its UI; launchgate checks every
//! workload of the queue in the cluster, however it was submitted.
//!
//! Per queue, [`LimitsConfig`] holds the template text, the variables' schemas, explicit
//! field limits, per-workload totals, and a few platform guardrails. [`QueueLimits::compile`]
//! checks and compiles it once; [`check_limits`] then checks each admitted object and
//! returns one message per violation.
//!
//! * [`quantity`]: exact Kubernetes quantities (`13000Mi > 12Gi`).
//! * [`path`]: field paths (`containers[*].resources.limits["nvidia.com/gpu"]`).
//! * [`schema`]: the W&B value schema (`type`, `minimum`, `maximum`, `enum`).
//! * [`template`]: the queue template and where its variables land.
//! * `binding`: which pod templates and containers of a workload a template position means
//!   (by role and name), and the envelope that holds every other container.

mod binding;
mod check;
pub mod distributed;
pub mod guardrails;
mod known_fields;
pub mod native;
pub mod path;
pub mod schema;
pub mod template;

pub use check::{Admitted, Candidate, Scope, add_violations, as_carried, check_limits};
pub use schema::ValueType;

use crate::error::ConfigError;
use crate::rules::Violation;
use crate::workload::WorkloadKind;
use crate::workload::consumption::Accelerators;
use path::{FieldPath, Segment};
use schema::{Schema, SchemaKeys};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use template::{Anchor, LeafContent, Piece, TemplateLeaf};

/// Per-queue limits as written in the config (`queues.<name>.limits`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LimitsConfig {
    /// What happens to a violation: deny (default), warn or audit.
    pub enforcement: Enforcement,
    /// The W&B queue config with `{{var}}` placeholders: YAML or JSON text pasted as-is
    /// (or a mapping).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<Value>,
    /// Also reject changes to the template's fixed (non-variable) values.
    pub strict: bool,
    /// The template's variables, W&B style: a map `name: {type, minimum, maximum, enum,
    /// default}` (or `name: {schema: {…}}`), or W&B's list `[{name, description, schema}]`.
    #[serde(deserialize_with = "deserialize_variables")]
    #[schemars(with = "VariablesShape")]
    pub variables: BTreeMap<String, VariableConfig>,
    /// Limits by field path, relative to each pod spec (or absolute from `spec.`/`metadata.`).
    pub fields: Vec<FieldLimitConfig>,
    /// Per-workload totals by resource name: Σ over pod templates of the pods that can run at
    /// once × the per-pod amount.
    pub totals: BTreeMap<String, TotalLimitConfig>,
    /// Largest allowed `activeDeadlineSeconds`; when set, a workload must have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_active_deadline_seconds: Option<i64>,
    /// Image prefixes containers may come from (`ghcr.io/acme`, `docker.io/acme`).
    pub allowed_registries: Vec<String>,
    /// Namespaces the queue's workloads may run in.
    pub allowed_namespaces: Vec<String>,
    /// A TrainJob that leaves `spec.trainer.numNodes` or `resourcesPerNode` to a runtime
    /// launchgate cannot read (no cluster lookups, or the runtime is not found): `deny`
    /// (default) or `warn` that the runtime's size cannot be verified. Applies when the queue
    /// has `totals` or a GPU-hour ceiling (`guardrails.costCeiling.maxGpuHours`).
    pub unverifiable_runtime: UnverifiableRuntime,
    /// Which training runtimes a TrainJob may name: `clusterOnly` (default: the
    /// ClusterTrainingRuntimes the platform team installs) or `namespaced` (a namespaced
    /// TrainingRuntime too, which a tenant may own and change after the TrainJob was admitted:
    /// the JobSet Trainer makes from it is still judged on the queue's totals).
    pub training_runtimes: TrainingRuntimes,
}

/// Which training runtimes a queue's TrainJobs may name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TrainingRuntimes {
    /// Only ClusterTrainingRuntimes (cluster-scoped, the platform team's).
    #[default]
    ClusterOnly,
    /// ClusterTrainingRuntimes and namespaced TrainingRuntimes.
    Namespaced,
}

impl TrainingRuntimes {
    /// `clusterOnly` or `namespaced`, as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            TrainingRuntimes::ClusterOnly => "clusterOnly",
            TrainingRuntimes::Namespaced => "namespaced",
        }
    }
}

/// What happens to a TrainJob whose size its runtime decides and cannot be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum UnverifiableRuntime {
    /// Rejected, naming what is left to which runtime.
    #[default]
    Deny,
    /// Allowed with a warning.
    Warn,
}

impl UnverifiableRuntime {
    /// `deny` or `warn`, as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            UnverifiableRuntime::Deny => "deny",
            UnverifiableRuntime::Warn => "warn",
        }
    }
}

/// What happens to a violation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    /// Rejected, with every violation in the message.
    #[default]
    Deny,
    /// Allowed, with the violations as AdmissionResponse warnings (kubectl prints them).
    Warn,
    /// Allowed; violations are logged, counted and put in an audit annotation.
    Audit,
}

impl Enforcement {
    /// How a violation under this enforcement is answered.
    pub fn effect(self) -> crate::rules::Effect {
        match self {
            Enforcement::Deny => crate::rules::Effect::Deny,
            Enforcement::Warn => crate::rules::Effect::Warn,
            Enforcement::Audit => crate::rules::Effect::Audit,
        }
    }
}

/// A template variable's schema. W&B nests it as `{schema: {...}}`; both forms are accepted.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VariableConfig {
    /// The placeholder's name, in W&B's list form (`[{name: gpus, schema: …}]`) and the
    /// Terraform provider's map (`variable1: {name: gpus, …}`); defaults to the map key.
    #[serde(default, skip_serializing)]
    pub name: Option<String>,
    /// The variable's type: `integer`, `number` (W&B's `float`), `string` or `quantity`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub value_type: Option<ValueType>,
    /// Smallest value the variable may take (a quantity for `quantity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<Value>,
    /// Largest value the variable may take (a quantity for `quantity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<Value>,
    /// The only values the variable may take.
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<Value>>,
    /// The value W&B fills in when the user gives none; checked against the schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// A workload without the value is a violation (otherwise an absent value is allowed).
    #[serde(default)]
    pub required: bool,
    /// What the variable is for (W&B shows it in the launch UI); not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// W&B's nested form: `gpus: {schema: {type: integer, minimum: 0, maximum: 4}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Box<VariableConfig>>,
}

impl VariableConfig {
    fn keys(&self) -> SchemaKeys<'_> {
        SchemaKeys {
            value_type: self.value_type,
            minimum: self.minimum.as_ref(),
            maximum: self.maximum.as_ref(),
            allowed: self.allowed.as_deref(),
            default: self.default.as_ref(),
            required: self.required,
        }
    }

    fn has_schema_keys(&self) -> bool {
        self.value_type.is_some()
            || self.minimum.is_some()
            || self.maximum.is_some()
            || self.allowed.is_some()
            || self.default.is_some()
    }
}

/// The two shapes `variables` comes in (for the JSON Schema of the config).
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum VariablesShape {
    /// `gpus: {type: integer, maximum: 4}`
    Map(BTreeMap<String, VariableConfig>),
    /// `[{name: gpus, description: …, schema: {type: integer, maximum: 4}}]`
    List(Vec<VariableConfig>),
}

/// `variables` as a map (keyed by name, or by a label when the entry has `name`) or as W&B's
/// list of named entries; the result is keyed by the placeholder's name.
fn deserialize_variables<'de, D>(d: D) -> Result<BTreeMap<String, VariableConfig>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::{Error, MapAccess, SeqAccess, Visitor};
    struct Variables;
    fn add<E: Error>(
        out: &mut BTreeMap<String, VariableConfig>,
        key: Option<String>,
        mut v: VariableConfig,
    ) -> Result<(), E> {
        let Some(name) = v.name.take().or(key) else {
            return Err(E::custom("a variable in the list has no `name`"));
        };
        if out.insert(name.clone(), v).is_some() {
            return Err(E::custom(format!("variable {name:?} is defined twice")));
        }
        Ok(())
    }
    impl<'de> Visitor<'de> for Variables {
        type Value = BTreeMap<String, VariableConfig>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(
                "a map of variable name to schema, or a list of {name, description, schema}",
            )
        }
        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                let v: VariableConfig = map.next_value()?;
                add(&mut out, Some(key), v)?;
            }
            Ok(out)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(v) = seq.next_element::<VariableConfig>()? {
                add(&mut out, None, v)?;
            }
            Ok(out)
        }
    }
    d.deserialize_any(Variables)
}

/// A limit on a field by path.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FieldLimitConfig {
    /// E.g. `containers[*].resources.limits.memory` (relative to each pod spec) or
    /// `spec.parallelism` (absolute).
    pub path: String,
    /// How the field's value is compared: `integer`, `number` (W&B's `float`), `string` or `quantity`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub value_type: Option<ValueType>,
    /// Smallest value allowed (a quantity for `quantity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<Value>,
    /// Largest value allowed (a quantity for `quantity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<Value>,
    /// The only values allowed.
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<Value>>,
    /// A workload without the field is a violation (otherwise an absent field is allowed).
    #[serde(default)]
    pub required: bool,
}

/// Bounds of a per-workload total (quantities).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TotalLimitConfig {
    /// Smallest total a workload may ask for (a quantity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<Value>,
    /// Largest total a workload may ask for (a quantity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<Value>,
}

/// Where a variable lands in a workload, derived from the template.
#[derive(Debug, Clone)]
struct VariableLocation {
    anchor: Anchor,
    /// Where the placeholder is in the template (binds its pod template and container).
    template_path: FieldPath,
    path: FieldPath,
    /// The template leaf's content, e.g. `[Variable("gpus")]`.
    pattern: Vec<Piece>,
    /// The template leaf as written, for messages.
    written: String,
}

#[derive(Debug, Clone)]
struct VariableLimit {
    name: String,
    schema: Schema,
    locations: Vec<VariableLocation>,
}

#[derive(Debug, Clone)]
struct FieldLimit {
    written: String,
    anchor: Anchor,
    path: FieldPath,
    schema: Schema,
}

#[derive(Debug, Clone)]
struct TotalLimit {
    resource: String,
    schema: Schema,
}

/// Compiled limits of one queue.
#[derive(Debug, Default)]
pub struct QueueLimits {
    enforcement: Enforcement,
    variables: Vec<VariableLimit>,
    fields: Vec<FieldLimit>,
    /// The kind the template describes; root-level template positions apply only to it.
    template_kind: Option<WorkloadKind>,
    /// The template's pod templates and container names, to bind positions by role and name.
    shape: binding::TemplateShape,
    /// Per resource, the most any container may have (holds containers and tasks the
    /// template does not describe).
    envelope: Vec<binding::Ceiling>,
    /// `strict`: the template's fixed values.
    fixed_values: Vec<TemplateLeaf>,
    totals: Vec<TotalLimit>,
    /// The resources of the envelope and the totals that the accelerator map counts as a
    /// whole GPU (`nvidia.com/gpu`): limits on them are limits on GPUs however asked for.
    whole_gpus: Vec<String>,
    max_active_deadline_seconds: Option<i64>,
    allowed_registries: Vec<String>,
    allowed_namespaces: Vec<String>,
    unverifiable_runtime: UnverifiableRuntime,
    training_runtimes: TrainingRuntimes,
}

impl QueueLimits {
    /// True when the queue bounds a workload's totals.
    pub fn has_totals(&self) -> bool {
        !self.totals.is_empty()
    }

    /// True when the queue limits GPUs by its limits: a most any container may have, or a
    /// total, on a resource the accelerator map counts as a whole GPU.
    pub fn limits_gpus(&self) -> bool {
        !self.whole_gpus.is_empty()
    }

    /// True when `resource` is one of the queue's limited resources that counts as a whole GPU.
    pub(crate) fn is_whole_gpu(&self, resource: &str) -> bool {
        self.whole_gpus.iter().any(|r| r == resource)
    }

    /// What happens to a TrainJob whose runtime-decided size cannot be read.
    pub fn unverifiable_runtime(&self) -> UnverifiableRuntime {
        self.unverifiable_runtime
    }

    /// Which training runtimes the queue's TrainJobs may name.
    pub fn training_runtimes(&self) -> TrainingRuntimes {
        self.training_runtimes
    }

    /// How the queue answers a violation of its limits.
    pub fn enforcement(&self) -> Enforcement {
        self.enforcement
    }

    /// The most of `resource` (`limits`: `kind`) any container of this queue may have, with the
    /// limit it comes from, when the queue bounds it for every container.
    pub fn container_ceiling(
        &self,
        kind: &str,
        resource: &str,
    ) -> Option<(crate::quantity::Quantity, &str)> {
        self.envelope
            .iter()
            .find(|c| c.kind == kind && c.resource == resource)
            .map(|c| (c.value, c.source.text.as_str()))
    }

    /// Checks and compiles `cfg`, found at `at` (e.g. `queues.gpu-queue.limits`), GPUs counted
    /// by `accelerators`. Every problem is reported, each with the key path it concerns.
    pub fn compile(
        cfg: &LimitsConfig,
        at: &str,
        accelerators: &Accelerators,
    ) -> Result<Self, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut limits = QueueLimits {
            enforcement: cfg.enforcement,
            unverifiable_runtime: cfg.unverifiable_runtime,
            training_runtimes: cfg.training_runtimes,
            ..QueueLimits::default()
        };

        let mut schemas = BTreeMap::new();
        for (name, variable) in &cfg.variables {
            let var_at = format!("{at}.variables.{name}");
            let (keys, keys_at) = match &variable.schema {
                Some(_) if variable.has_schema_keys() => {
                    errors.push(ConfigError::new(
                        var_at.clone(),
                        "give the schema either nested under `schema:` or directly, not both",
                    ));
                    continue;
                }
                Some(nested) if nested.schema.is_some() => {
                    errors.push(ConfigError::new(
                        format!("{var_at}.schema.schema"),
                        "`schema` cannot be nested twice",
                    ));
                    continue;
                }
                Some(nested) => {
                    let required = nested.required || variable.required;
                    (
                        SchemaKeys {
                            required,
                            ..nested.keys()
                        },
                        format!("{var_at}.schema"),
                    )
                }
                None => (variable.keys(), var_at.clone()),
            };
            if let Some(schema) = Schema::compile(&keys, &keys_at, &mut errors) {
                schemas.insert(name.clone(), schema);
            }
        }

        let template = match &cfg.template {
            None => None,
            Some(source) => match template::parse(source) {
                Ok(t) => Some(t),
                Err(message) => {
                    let text = match source {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    let names: BTreeSet<String> = template::pieces(&text)
                        .into_iter()
                        .filter_map(|p| match p {
                            Piece::Variable(name) => Some(format!("{name:?}")),
                            _ => None,
                        })
                        .collect();
                    let names: Vec<String> = names.into_iter().collect();
                    let unchecked = match names.len() {
                        0 => String::new(),
                        1 => format!("; variable {} would never be checked", names[0]),
                        _ => format!("; variables {} would never be checked", names.join(", ")),
                    };
                    errors.push(ConfigError::new(
                        format!("{at}.template"),
                        format!("{message}{unchecked}"),
                    ));
                    None
                }
            },
        };
        if cfg.strict && cfg.template.is_none() {
            errors.push(ConfigError::new(
                format!("{at}.strict"),
                "`strict: true` needs a `template` whose fixed values it enforces",
            ));
        }

        let mut locations: BTreeMap<&str, Vec<VariableLocation>> = BTreeMap::new();
        if let Some(template) = &template {
            limits.template_kind = Some(template.kind);
            limits.shape = binding::TemplateShape::of(Some(template.kind), &template.leaves);
            let mut reported = BTreeSet::new();
            for (name, place) in &template.stray_variables {
                errors.push(ConfigError::new(
                    format!("{at}.template"),
                    format!(
                        "{{{{{name}}}}} at {place} is outside the Kubernetes object ({}), so no check would ever read it",
                        template.wrapper.describe()
                    ),
                ));
                reported.insert(name.clone());
            }
            for leaf in &template.leaves {
                let pattern = match &leaf.content {
                    LeafContent::Pattern(p) => p,
                    LeafContent::Literal(_) => {
                        if cfg.strict && !leaf.under_macro_key {
                            limits.fixed_values.push(leaf.clone());
                        }
                        continue;
                    }
                };
                if let Some(why) = unread_position(leaf, template.kind) {
                    for name in leaf.variables() {
                        errors.push(ConfigError::new(
                            format!("{at}.template"),
                            format!(
                                "{{{{{name}}}}} at {}: {why}, so no check would ever read variable {name:?}",
                                leaf.template_path
                            ),
                        ));
                        reported.insert(name.to_string());
                    }
                    continue;
                }
                let mut has_variable = false;
                for name in leaf.variables() {
                    has_variable = true;
                    let Some((known, _)) = cfg.variables.get_key_value(name) else {
                        if reported.insert(name.to_string()) {
                            errors.push(ConfigError::new(
                                format!("{at}.template"),
                                format!(
                                    "placeholder {{{{{name}}}}} at {} has no schema: add `variables.{name}` with its type and bounds",
                                    leaf.template_path
                                ),
                            ));
                        }
                        continue;
                    };
                    let entry = locations.entry(known.as_str()).or_default();
                    let duplicate = entry
                        .iter()
                        .any(|l| l.template_path == leaf.template_path && l.pattern == *pattern);
                    if !duplicate {
                        entry.push(VariableLocation {
                            anchor: leaf.anchor,
                            template_path: leaf.template_path.clone(),
                            path: leaf.path.clone(),
                            pattern: pattern.clone(),
                            written: pattern_text(pattern),
                        });
                    }
                }
                let only_macros = pattern.iter().all(|p| matches!(p, Piece::Macro));
                if cfg.strict && !has_variable && !only_macros && !leaf.under_macro_key {
                    limits.fixed_values.push(leaf.clone());
                }
            }
        }
        if let Some(t) = &template
            && !cfg.strict
            && t.stray_variables.is_empty()
            && t.leaves.iter().all(|l| l.variables().next().is_none())
        {
            errors.push(ConfigError::new(
                format!("{at}.template"),
                "the template has no {{variable}} and `strict` is false, so it limits nothing: put the W&B variables in it (`{{gpus}}` where the value goes, with `variables.gpus`), set `strict: true`, or remove it",
            ));
        }
        let unread: BTreeSet<String> = template
            .iter()
            .flat_map(|t| {
                t.leaves
                    .iter()
                    .flat_map(|l| l.variables().map(str::to_string))
                    .chain(t.stray_variables.iter().map(|(n, _)| n.clone()))
            })
            .collect();
        for name in cfg.variables.keys() {
            if locations.contains_key(name.as_str()) {
                continue;
            }
            if unread.contains(name) || (cfg.template.is_some() && template.is_none()) {
                // Reported above: its template positions, or the template itself.
                continue;
            }
            let why = if cfg.template.is_some() {
                format!("variable {name:?} does not appear in the template as {{{{{name}}}}}")
            } else {
                format!(
                    "variable {name:?} has no location: add the queue `template` with {{{{{name}}}}} where it goes, or use `fields` to limit a path"
                )
            };
            errors.push(ConfigError::new(format!("{at}.variables.{name}"), why));
        }
        for (name, schema) in schemas {
            if let Some(found) = locations.remove(name.as_str()) {
                limits.variables.push(VariableLimit {
                    name,
                    schema,
                    locations: found,
                });
            }
        }

        for (i, field) in cfg.fields.iter().enumerate() {
            let field_at = format!("{at}.fields[{i}]");
            let path = match FieldPath::parse(&field.path) {
                Ok(p) => Some(p),
                Err(why) => {
                    errors.push(ConfigError::new(
                        format!("{field_at}.path"),
                        format!("bad path {:?}: {why}", field.path),
                    ));
                    None
                }
            };
            let keys = SchemaKeys {
                value_type: field.value_type,
                minimum: field.minimum.as_ref(),
                maximum: field.maximum.as_ref(),
                allowed: field.allowed.as_deref(),
                default: None,
                required: field.required,
            };
            let schema = Schema::compile(&keys, &field_at, &mut errors);
            if let (Some(path), Some(schema)) = (path, schema) {
                let (anchor, path) = field_anchor(path);
                if let Some(why) = unknown_field(limits.template_kind, anchor, &path) {
                    errors.push(ConfigError::new(
                        format!("{field_at}.path"),
                        format!(
                            "{:?}: {why}, so this limit would never be checked",
                            field.path
                        ),
                    ));
                    continue;
                }
                limits.fields.push(FieldLimit {
                    written: field.path.clone(),
                    anchor,
                    path,
                    schema,
                });
            }
        }

        for (resource, bounds) in &cfg.totals {
            let keys = SchemaKeys {
                value_type: Some(ValueType::Quantity),
                minimum: bounds.minimum.as_ref(),
                maximum: bounds.maximum.as_ref(),
                ..SchemaKeys::default()
            };
            let total_at = format!("{at}.totals.{resource}");
            if bounds.minimum.is_none() && bounds.maximum.is_none() {
                errors.push(ConfigError::new(
                    total_at.clone(),
                    "give `maximum` and/or `minimum`",
                ));
            }
            if let Some(schema) = Schema::compile(&keys, &total_at, &mut errors) {
                limits.totals.push(TotalLimit {
                    resource: resource.clone(),
                    schema,
                });
            }
        }

        if let Some(seconds) = cfg.max_active_deadline_seconds
            && seconds <= 0
        {
            errors.push(ConfigError::new(
                format!("{at}.maxActiveDeadlineSeconds"),
                format!("must be a positive number of seconds, got {seconds}"),
            ));
        }
        limits.max_active_deadline_seconds = cfg.max_active_deadline_seconds;
        for (i, prefix) in cfg.allowed_registries.iter().enumerate() {
            let trimmed = prefix.trim().trim_end_matches('/');
            if trimmed.is_empty() {
                errors.push(ConfigError::new(
                    format!("{at}.allowedRegistries[{i}]"),
                    "empty registry prefix (it would allow every image)",
                ));
            } else {
                limits
                    .allowed_registries
                    .push(check::normalized_registry(trimmed));
            }
        }
        for (i, namespace) in cfg.allowed_namespaces.iter().enumerate() {
            if namespace.trim().is_empty() {
                errors.push(ConfigError::new(
                    format!("{at}.allowedNamespaces[{i}]"),
                    "empty namespace name",
                ));
            }
        }
        limits.allowed_namespaces = cfg.allowed_namespaces.clone();

        limits.envelope = binding::envelope(&limits.variables, &limits.fields);
        let resources = (limits.envelope.iter().map(|c| &c.resource))
            .chain(limits.totals.iter().map(|t| &t.resource));
        for resource in resources {
            if accelerators.is_gpu(resource) && !limits.is_whole_gpu(resource) {
                limits.whole_gpus.push(resource.clone());
            }
        }
        if errors.is_empty() {
            Ok(limits)
        } else {
            Err(errors)
        }
    }

    /// Caps that do not hold, as config warnings at `at` (e.g. `queues.gpu-queue.limits`).
    ///
    /// A cap on `resources.limits.<r>` of an overcommitable resource (cpu, memory,
    /// ephemeral-storage: a container may request it without a limit) bounds nothing for a
    /// container that sets no limit: the scheduler reserves its `requests`, whatever they are.
    /// Such a cap holds only with a bound on `resources.requests.<r>` too, or when every
    /// container must set the limit (`required: true` on `containers[*]` and
    /// `initContainers[*]`, since Kubernetes refuses requests above the limit).
    pub fn warnings(&self, at: &str) -> Vec<ConfigError> {
        let mut warnings = Vec::new();
        for cap in self.envelope.iter().filter(|c| c.kind == "limits") {
            let resource = cap.resource.as_str();
            if !overcommitable(resource)
                || self.container_ceiling("requests", resource).is_some()
                || self.limit_required_on_every_container(resource)
            {
                continue;
            }
            warnings.push(ConfigError::new(
                at,
                format!(
                    "{} ({}) caps resources.limits.{resource} only: a container that sets no limit can still request any amount of {resource} (requests are what the scheduler reserves); also bound `containers[*].resources.requests.{resource}` with the same maximum, or make the limit `required: true` on `containers[*]` and `initContainers[*]`",
                    cap.source.text,
                    cap.schema.describe()
                ),
            ));
        }
        warnings
    }

    /// True when a `fields` entry requires `resources.limits.<resource>` on every container
    /// of every container list.
    fn limit_required_on_every_container(&self, resource: &str) -> bool {
        crate::workload::CONTAINER_LISTS.iter().all(|list| {
            self.fields.iter().any(|f| {
                f.schema.required
                    && f.anchor == Anchor::PodTemplate
                    && matches!(
                        f.path.0.as_slice(),
                        [
                            Segment::Key(spec),
                            Segment::Key(l),
                            Segment::AnyIndex,
                            Segment::Key(res),
                            Segment::Key(kind),
                            Segment::Key(r),
                        ] if spec == "spec" && l == list && res == "resources" && kind == "limits" && r == resource
                    )
            })
        })
    }

    /// What the limits enforce, one line per limit, e.g. `variable "gpus" (integer 0..4):
    /// spec.containers[0].resources.limits["nvidia.com/gpu"] of every pod template`.
    pub fn describe(&self) -> Vec<String> {
        let place = |anchor: Anchor, path: &FieldPath, pods: String| match anchor {
            Anchor::PodTemplate => format!("{path} of {pods}"),
            Anchor::Root => match self.template_kind {
                Some(kind) => format!("{path} of a {}", kind.as_str()),
                None => path.to_string(),
            },
        };
        let mut lines = Vec::new();
        if !self.allowed_namespaces.is_empty() {
            lines.push(format!(
                "namespace: one of {}",
                self.allowed_namespaces.join(", ")
            ));
        }
        for variable in &self.variables {
            let places: Vec<String> = variable
                .locations
                .iter()
                .map(|l| {
                    let pods = self.shape.pod_templates_of(&l.template_path, &l.path);
                    let at = place(l.anchor, &l.path, pods);
                    match l.pattern.as_slice() {
                        [Piece::Variable(_)] => at,
                        _ => format!("{at} (as {:?})", l.written),
                    }
                })
                .collect();
            let description = variable.schema.describe();
            lines.push(format!(
                "variable {:?} ({description}): {}",
                variable.name,
                places.join("; ")
            ));
        }
        for field in &self.fields {
            lines.push(format!(
                "field {:?} ({}): {}",
                field.written,
                field.schema.describe(),
                place(field.anchor, &field.path, "every pod template".into())
            ));
        }
        if !self.fixed_values.is_empty() {
            lines.push(format!(
                "strict: the template's {} fixed values",
                self.fixed_values.len()
            ));
        }
        for total in &self.totals {
            lines.push(format!(
                "total {} over all pods ({})",
                total.resource,
                total.schema.describe()
            ));
        }
        if !self.totals.is_empty() {
            lines.push(format!(
                "a TrainJob whose size is its runtime's, which cannot be read: {} (unverifiableRuntime)",
                self.unverifiable_runtime.as_str()
            ));
        }
        if let Some(seconds) = self.max_active_deadline_seconds {
            lines.push(format!(
                "activeDeadlineSeconds: required, at most {seconds}"
            ));
        }
        if !self.allowed_registries.is_empty() {
            lines.push(format!(
                "images from: {}",
                self.allowed_registries.join(", ")
            ));
        }
        lines
    }

    /// True when nothing is limited.
    pub fn is_empty(&self) -> bool {
        self.variables.is_empty()
            && self.fields.is_empty()
            && self.fixed_values.is_empty()
            && self.totals.is_empty()
            && self.max_active_deadline_seconds.is_none()
            && self.allowed_registries.is_empty()
            && self.allowed_namespaces.is_empty()
    }
}

/// A resource a container may request without a limit: Kubernetes' native resources (no
/// domain, or a `kubernetes.io/` one) except huge pages. Extended resources (`nvidia.com/gpu`)
/// and huge pages must have a limit, and their request equals it.
fn overcommitable(resource: &str) -> bool {
    let native = match resource.split_once('/') {
        None => true,
        Some((domain, _)) => domain == "kubernetes.io" || domain.ends_with(".kubernetes.io"),
    };
    native && !resource.starts_with("hugepages-")
}

/// Why no check could ever read the template position of `leaf`, if so: a key filled in by
/// a `${macro}`, a pod-template position outside the pod's `metadata`/`spec`, or an object
/// position outside `metadata`/`spec`.
fn unread_position(leaf: &TemplateLeaf, kind: WorkloadKind) -> Option<String> {
    if leaf.under_macro_key {
        return Some("a key on the way is a ${macro} the agent fills in, so the position cannot be found in a workload".into());
    }
    let first = match leaf.path.0.first() {
        Some(Segment::Key(k)) => k.as_str(),
        _ => "",
    };
    match leaf.anchor {
        Anchor::PodTemplate if first == "spec" || first == "metadata" => None,
        Anchor::PodTemplate => Some(format!(
            "the pod template of this {} has `{first}` where a pod has only `metadata` and `spec`",
            kind.as_str()
        )),
        Anchor::Root if first == "spec" || first == "metadata" => None,
        Anchor::Root if first == "namespace" => Some(
            "W&B's top-level `namespace` is not part of the workload (use `allowedNamespaces`)"
                .into(),
        ),
        Anchor::Root => Some(format!(
            "`{first}` is not part of a {} (only `metadata` and `spec` are checked)",
            kind.as_str()
        )),
    }
    .or_else(|| unknown_field(Some(kind), leaf.anchor, &leaf.path))
}

/// Why `path` (at `anchor`, in a workload of `kind`) designates no field of the kind's
/// Kubernetes type, when it does not (see [`known_fields`]).
fn unknown_field(kind: Option<WorkloadKind>, anchor: Anchor, path: &FieldPath) -> Option<String> {
    let in_pod_template = anchor == Anchor::PodTemplate;
    let at = known_fields::unknown_from(kind, in_pod_template, &path.0)?;
    let known = FieldPath(path.0[..at].to_vec());
    let unknown = FieldPath(path.0[..=at.min(path.0.len() - 1)].to_vec());
    let whose = match (in_pod_template, kind) {
        (true, _) => "a pod template".to_string(),
        (false, Some(kind)) => format!("a {}", kind.as_str()),
        (false, None) => "the workload".to_string(),
    };
    Some(if known.0.is_empty() {
        format!("`{unknown}` is not a field of {whose}")
    } else {
        format!("`{unknown}` is not a field of {whose} (`{known}` is)")
    })
}

/// A `fields` path: absolute when it starts at `spec`/`metadata`, else relative to each pod
/// spec (so `containers[*]...` means `<pod template>.spec.containers[*]...`).
fn field_anchor(path: FieldPath) -> (Anchor, FieldPath) {
    match path.0.first() {
        Some(Segment::Key(k)) if k == "spec" || k == "metadata" => (Anchor::Root, path),
        _ => {
            let mut segments = vec![Segment::Key("spec".into())];
            segments.extend(path.0);
            (Anchor::PodTemplate, FieldPath(segments))
        }
    }
}

/// A pattern written back as template text (`{{gpus}}`, `${run_id}-job`).
fn pattern_text(pattern: &[Piece]) -> String {
    pattern
        .iter()
        .map(|p| match p {
            Piece::Text(t) => t.clone(),
            Piece::Variable(name) => format!("{{{{{name}}}}}"),
            Piece::Macro => "${...}".to_string(),
        })
        .collect()
}

/// The result of checking an object against its queue's limits.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LimitReport {
    pub enforcement: Enforcement,
    /// One per violation, its message naming queue, field path, value and limit.
    pub violations: Vec<Violation>,
    /// Things the user should know that are not violations (e.g. violations an UPDATE
    /// left unchanged), each with its rule's or notice's id.
    pub warnings: Vec<crate::rules::Warning>,
    /// The violations an UPDATE left as they were, each with its warning as the message
    /// (allowed, not counted as violations).
    pub unchanged: Vec<Violation>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile_yaml(yaml: &str) -> Result<QueueLimits, Vec<ConfigError>> {
        let cfg: LimitsConfig = serde_yaml::from_str(yaml).expect("valid LimitsConfig YAML");
        QueueLimits::compile(&cfg, "queues.q.limits", &Accelerators::default())
    }

    fn errors_of(yaml: &str) -> Vec<String> {
        compile_yaml(yaml)
            .expect_err("config should be rejected")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn default_is_empty_and_compiles() {
        assert!(
            QueueLimits::compile(&LimitsConfig::default(), "x", &Accelerators::default())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn placeholder_without_schema_is_named() {
        let errors = errors_of(
            "template: |\n  spec:\n    template:\n      spec:\n        containers:\n          - resources: {limits: {cpu: '{{cpu}}'}}\n",
        );
        assert_eq!(
            errors,
            vec![
                "queues.q.limits.template: placeholder {{cpu}} at spec.template.spec.containers[0].resources.limits.cpu has no schema: add `variables.cpu` with its type and bounds"
            ]
        );
    }

    #[test]
    fn minimum_above_maximum_is_named() {
        let errors = errors_of(
            "template: \"spec: {template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}}]}}}\"\nvariables:\n  gpus: {type: integer, minimum: 5, maximum: 4}\n",
        );
        assert_eq!(
            errors,
            vec!["queues.q.limits.variables.gpus.minimum: minimum 5 is greater than maximum 4"]
        );
    }

    #[test]
    fn wandb_nested_schema_form_is_accepted() {
        let limits = compile_yaml(
            "template: \"spec: {template: {spec: {containers: [{resources: {limits: {cpu: '{{cpu}}'}}}]}}}\"\nvariables:\n  cpu: {schema: {type: integer, minimum: 1, maximum: 4}}\n",
        )
        .unwrap();
        assert_eq!(limits.variables.len(), 1);
        let errors = errors_of(
            "template: \"spec: {parallelism: '{{cpu}}'}\"\nvariables:\n  cpu: {schema: {type: integer, minimum: 5, maximum: 4}}\n",
        );
        assert_eq!(
            errors,
            vec![
                "queues.q.limits.variables.cpu.schema.minimum: minimum 5 is greater than maximum 4"
            ]
        );
    }

    #[test]
    fn a_path_that_is_no_field_of_the_kind_is_a_config_error() {
        let errors = errors_of(
            r#"
template: |
  apiVersion: batch/v1
  kind: Job
  spec:
    replicas: '{{workers}}'
    template:
      spec:
        containers:
          - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}
variables:
  workers: {type: integer, maximum: 4}
  gpus: {type: integer, maximum: 4}
fields:
  - {path: "containers[*].resources.limit.cpu", type: quantity, maximum: "4"}
  - {path: "containers[*].resources.limits.cpu", type: quantity, maximum: "4"}
"#,
        );
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(
            errors[0].starts_with("queues.q.limits.template: {{workers}} at spec.replicas: `spec.replicas` is not a field of a Job"),
            "{errors:#?}"
        );
        assert!(
            errors[1].starts_with(r#"queues.q.limits.fields[0].path: "containers[*].resources.limit.cpu": `spec.containers[*].resources.limit` is not a field of a pod template"#),
            "{errors:#?}"
        );
    }

    #[test]
    fn every_config_problem_is_reported_with_its_path() {
        let errors = errors_of(
            r#"
template: "spec: {parallelism: '{{known}}'}"
strict: false
variables:
  known: {type: quantity, maximum: lots}
  unused: {type: string, enum: [a, 1]}
fields:
  - {path: "containers[x].image", type: string}
  - {path: "containers[*].resources.limits.cpu", type: integer, maximum: 2.5}
totals:
  nvidia.com/gpu: {}
maxActiveDeadlineSeconds: 0
allowedRegistries: [""]
"#,
        );
        let expected_paths = [
            "queues.q.limits.variables.known.maximum: maximum lots is not a valid quantity",
            "queues.q.limits.variables.unused.enum[1]: enum value 1 is not a string",
            "queues.q.limits.variables.unused: variable \"unused\" does not appear in the template",
            "queues.q.limits.fields[0].path: bad path",
            "queues.q.limits.fields[1].maximum: maximum 2.5 is not an integer",
            "queues.q.limits.totals.nvidia.com/gpu: give `maximum` and/or `minimum`",
            "queues.q.limits.maxActiveDeadlineSeconds: must be a positive",
            "queues.q.limits.allowedRegistries[0]: empty registry prefix",
        ];
        for expected in expected_paths {
            assert!(
                errors.iter().any(|e| e.starts_with(expected)),
                "missing {expected:?} in {errors:#?}"
            );
        }
        assert_eq!(errors.len(), expected_paths.len(), "{errors:#?}");
    }

    #[test]
    fn variable_without_template_is_rejected() {
        let errors = errors_of("variables:\n  gpus: {type: integer, maximum: 4}\n");
        assert!(errors[0].contains("has no location"), "{errors:?}");
        let errors = errors_of("strict: true\n");
        assert!(
            errors[0].starts_with("queues.q.limits.strict:"),
            "{errors:?}"
        );
    }

    #[test]
    fn wandb_variable_list_and_terraform_map_forms_are_accepted() {
        let template = "template: \"spec: {template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}}]}}}\"\n";
        for variables in [
            "variables:\n  - {name: gpus, description: GPUs per pod, schema: {type: integer, minimum: 0, maximum: 4, default: 1}}\n",
            "variables:\n  variable1: {name: gpus, description: GPUs per pod, schema: {type: integer, maximum: 4}}\n",
            "variables:\n  gpus: {description: GPUs per pod, schema: {type: integer, maximum: 4}}\n",
        ] {
            let limits = compile_yaml(&format!("{template}{variables}")).unwrap();
            assert_eq!(limits.variables.len(), 1, "{variables}");
            assert_eq!(limits.variables[0].name, "gpus");
        }
        let dup = serde_yaml::from_str::<LimitsConfig>(
            "variables: [{name: a, schema: {type: integer}}, {name: a, schema: {type: integer}}]",
        )
        .unwrap_err();
        assert!(dup.to_string().contains("defined twice"), "{dup}");
        let unnamed =
            serde_yaml::from_str::<LimitsConfig>("variables: [{schema: {type: integer}}]")
                .unwrap_err();
        assert!(unnamed.to_string().contains("no `name`"), "{unnamed}");
    }

    #[test]
    fn a_template_that_limits_nothing_is_rejected() {
        let errors = errors_of(
            "template: \"kubernetes: {kind: PyTorchJob, spec: {pytorchReplicaSpecs: {Worker: {template: {spec: {containers: [{image: '${image_uri}'}]}}}}}}\"\n",
        );
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(
            errors[0].starts_with(
                "queues.q.limits.template: the template has no {{variable}} and `strict` is false, so it limits nothing"
            ),
            "{errors:#?}"
        );
        // The same template as a strict contract is a limit.
        compile_yaml(
            "strict: true\ntemplate: \"kubernetes: {kind: PyTorchJob, spec: {pytorchReplicaSpecs: {Worker: {template: {spec: {containers: [{image: '${image_uri}'}]}}}}}}\"\n",
        )
        .unwrap();
    }

    #[test]
    fn variables_no_check_reads_are_rejected() {
        let cases = [
            (
                "template: \"kubernetes: {kind: TFJob, spec: {tfReplicaSpecs: {Worker: {template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}}]}}}}}}\"\n",
                "queues.q.limits.template: kubernetes: kind \"TFJob\" is not a workload kind launchgate checks",
            ),
            (
                "template: \"spec: {template: {containers: [{resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}}]}}\"\n",
                "queues.q.limits.template: {{gpus}} at spec.template.containers[0].resources.limits[\"nvidia.com/gpu\"]: the pod template of this Job has `containers` where a pod has only `metadata` and `spec`, so no check would ever read variable \"gpus\"",
            ),
            (
                "template: \"namespace: '{{gpus}}'\\nspec: {}\"\n",
                "queues.q.limits.template: {{gpus}} at namespace: W&B's top-level `namespace` is not part of the workload",
            ),
            (
                "template: \"resource_args: {kubernetes: {spec: {}}}\\nresource: '{{gpus}}'\"\n",
                "queues.q.limits.template: {{gpus}} at resource is outside the Kubernetes object",
            ),
            (
                "template: \"metadata: {labels: {'${project_name}': '{{gpus}}'}}\"\n",
                "queues.q.limits.template: {{gpus}} at metadata.labels[\"${project_name}\"]: a key on the way is a ${macro}",
            ),
        ];
        for (template, expected) in cases {
            let errors = errors_of(&format!(
                "{template}variables:\n  gpus: {{type: integer, maximum: 4}}\n"
            ));
            assert_eq!(errors.len(), 1, "{template}: {errors:#?}");
            assert!(errors[0].starts_with(expected), "{template}: {errors:#?}");
        }
    }

    #[test]
    fn a_cap_on_limits_alone_is_a_warning_until_requests_are_bounded_or_limits_required() {
        let warnings = |fields: &str| -> Vec<String> {
            compile_yaml(&format!("fields:\n{fields}"))
                .unwrap()
                .warnings("queues.q.limits")
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let limits_only = "  - {path: \"containers[*].resources.limits.cpu\", type: quantity, maximum: \"4\"}\n  - {path: \"containers[*].resources.limits.memory\", type: quantity, maximum: 12Gi}\n  - {path: \"containers[*].resources.limits[\\\"nvidia.com/gpu\\\"]\", type: integer, maximum: 4}\n";
        let said = warnings(limits_only);
        assert_eq!(said.len(), 2, "{said:#?}");
        assert!(
            said[0].starts_with(
                "queues.q.limits: field \"containers[*].resources.limits.cpu\" (quantity at most 4) caps resources.limits.cpu only: a container that sets no limit can still request any amount of cpu"
            ),
            "{said:#?}"
        );
        assert!(
            said[1].contains("resources.limits.memory only"),
            "{said:#?}"
        );
        // Requests bounded too: the caps hold.
        let both = format!(
            "{limits_only}  - {{path: \"containers[*].resources.requests.cpu\", type: quantity, maximum: \"4\"}}\n  - {{path: \"initContainers[*].resources.requests.memory\", type: quantity, maximum: 12Gi}}\n"
        );
        assert_eq!(warnings(&both), Vec::<String>::new());
        // Limits required on every container: requests cannot exceed them.
        let required = "  - {path: \"containers[*].resources.limits.cpu\", type: quantity, maximum: \"4\", required: true}\n  - {path: \"initContainers[*].resources.limits.cpu\", type: quantity, maximum: \"4\", required: true}\n";
        assert_eq!(warnings(required), Vec::<String>::new());
        // Required on app containers only: an init container can still request any amount.
        let app_only = "  - {path: \"containers[*].resources.limits.cpu\", type: quantity, maximum: \"4\", required: true}\n";
        assert_eq!(warnings(app_only).len(), 1);
    }

    #[test]
    fn unknown_keys_and_types_are_rejected_by_the_parser() {
        assert!(serde_yaml::from_str::<LimitsConfig>("variables: {g: {type: float}}").is_ok());
        assert!(serde_yaml::from_str::<LimitsConfig>("variables: {g: {type: bool}}").is_err());
        assert!(serde_yaml::from_str::<LimitsConfig>("variables: {g: {maximim: 1}}").is_err());
        assert!(serde_yaml::from_str::<LimitsConfig>("enforcement: block").is_err());
        assert!(serde_yaml::from_str::<LimitsConfig>("maxDeadline: 1").is_err());
    }
}
