//! Queues as Kubernetes resources: a cluster-scoped `LaunchQueue` (`launchgate.io/v1alpha1`,
//! short name `lq`) is one queue of the config, named by the object and configured by its
//! `spec`, exactly a `queues.<name>` entry of the config file. A LaunchQueue overrides the
//! file's queue of the same name. Cluster-scoped, so only who may write cluster objects (the
//! platform team, not a tenant) sets a queue's limits.
//!
//! Everything here is pure: a manifest in, a queue (or the key path of what is wrong) out; the
//! CRD, generated from the same config types as the config reference; the config's queues as
//! manifests, for moving a file's queues to LaunchQueues.

use super::{Config, Policy, QueueConfig, json_schema};
use crate::error::{ConfigError, ConfigErrors};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The API group.
pub const GROUP: &str = "launchgate.io";
/// The served version.
pub const VERSION: &str = "v1alpha1";
/// The kind.
pub const KIND: &str = "LaunchQueue";
/// The resource (plural).
pub const PLURAL: &str = "launchqueues";
/// The short name (`kubectl get lq`).
pub const SHORT_NAME: &str = "lq";

/// The `apiVersion` of a LaunchQueue.
pub fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

/// Whether `object` is a LaunchQueue manifest.
pub fn is_launch_queue(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some(api_version().as_str())
        && object.get("kind").and_then(Value::as_str) == Some(KIND)
}

/// One LaunchQueue: its name (the queue's), the generation of its spec, and its spec as a
/// queue of the config.
#[derive(Debug, Clone)]
pub struct LaunchQueue {
    /// `metadata.name`: the queue's name.
    pub name: String,
    /// `metadata.generation` (0 for a manifest not yet stored).
    pub generation: i64,
    /// `spec`, read as a queue of the config.
    pub spec: QueueConfig,
}

/// Reads a LaunchQueue manifest. Errors name the key path (`spec.limits.fields[0].maximum`).
pub fn parse(object: &Value) -> Result<LaunchQueue, ConfigErrors> {
    let error = |path: &str, message: String| ConfigErrors(vec![ConfigError::new(path, message)]);
    if !is_launch_queue(object) {
        return Err(error(
            "",
            format!("not a {KIND} (apiVersion {}, kind {KIND})", api_version()),
        ));
    }
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            error(
                "metadata.name",
                "a LaunchQueue is named: the queue's name".into(),
            )
        })?;
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let spec = object.get("spec").cloned().unwrap_or_else(|| json!({}));
    let spec: QueueConfig = serde_path_to_error::deserialize(spec).map_err(|e| {
        let path = match e.path().to_string() {
            p if p == "." => "spec".to_string(),
            p => format!("spec.{p}"),
        };
        error(&path, e.into_inner().to_string())
    })?;
    Ok(LaunchQueue {
        name: name.to_string(),
        generation,
        spec,
    })
}

/// The config `base` with `queues` added, each replacing the config's queue of its name.
pub fn merged(mut base: Config, queues: &[LaunchQueue]) -> Config {
    for q in queues {
        base.queues.insert(q.name.clone(), q.spec.clone());
    }
    base
}

/// Checks `queue` as the config `base` would hold it: `Ok` when the config with it loads;
/// otherwise the errors about it, their paths as on the object (`spec.limits…`), or every
/// error when none is about it (a config that did not load without it either).
pub fn check(base: &Config, queue: &LaunchQueue) -> Result<(), ConfigErrors> {
    let Err(errors) = Policy::from_config(merged(base.clone(), std::slice::from_ref(queue))) else {
        return Ok(());
    };
    let prefix = format!("queues.{}", queue.name);
    let own: Vec<ConfigError> = errors
        .0
        .iter()
        .filter_map(|e| {
            let rest = e.path.strip_prefix(&prefix)?;
            let rest = match rest {
                "" => Some(""),
                r => r.strip_prefix('.'),
            }?;
            let path = if rest.is_empty() {
                "spec".to_string()
            } else {
                format!("spec.{rest}")
            };
            Some(ConfigError::new(path, e.message.clone()))
        })
        .collect();
    Err(if own.is_empty() {
        errors
    } else {
        ConfigErrors(own)
    })
}

/// What a set of LaunchQueues gives with the config `base`: the queues that hold (the latest
/// good spec of each, `last_good` keeping what held before for one whose spec no longer does),
/// and per LaunchQueue what is wrong with its current spec.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The queues served: each LaunchQueue's current spec when it holds, else its last good one.
    pub served: Vec<LaunchQueue>,
    /// What is wrong with a LaunchQueue's current spec, by name.
    pub invalid: BTreeMap<String, ConfigErrors>,
}

/// Resolves `current` (every LaunchQueue as stored, manifests not yet read included) against
/// `base`: a spec that does not hold never replaces `last_good`'s (by name), and a LaunchQueue
/// gone is dropped from it.
pub fn resolve(
    base: &Config,
    current: &[Value],
    last_good: &mut BTreeMap<String, LaunchQueue>,
) -> Resolved {
    let mut out = Resolved::default();
    let mut present = Vec::new();
    for object in current {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        present.push(name.clone());
        match parse(object).and_then(|q| check(base, &q).map(|()| q)) {
            Ok(q) => {
                last_good.insert(name, q);
            }
            Err(errors) => {
                out.invalid.insert(name, errors);
            }
        }
    }
    last_good.retain(|name, _| present.contains(name));
    out.served = last_good.values().cloned().collect();
    out
}

/// What `queue` caps per pod and per run, in short (the printer columns of `kubectl get lq`):
/// each most of a variable or field (named by its last key: `gpus≤4`, `nvidia.com/gpu≤1`),
/// then each total, the longest deadline and the GPU-hours per run. `-` for none.
pub fn caps(queue: &QueueConfig) -> (String, String) {
    fn text(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
    /// `limits["nvidia.com/gpu"]` → `nvidia.com/gpu`; `spec.replicas` → `replicas`.
    fn last_key(path: &str) -> &str {
        if let Some(quoted) = path.strip_suffix("\"]").or_else(|| path.strip_suffix("']")) {
            let cut = quoted.rfind(['"', '\'']).map_or(0, |i| i + 1);
            return &quoted[cut..];
        }
        let path = path.trim_end_matches(']');
        let cut = path.rfind(['.', '[']).map_or(0, |i| i + 1);
        &path[cut..]
    }
    let limits = &queue.limits;
    let mut pod: Vec<String> = limits
        .variables
        .iter()
        .filter_map(|(name, v)| Some(format!("{name}≤{}", text(v.maximum.as_ref()?))))
        .collect();
    pod.extend(limits.fields.iter().filter_map(|f| {
        Some(format!(
            "{}≤{}",
            last_key(&f.path),
            text(f.maximum.as_ref()?)
        ))
    }));
    let mut run: Vec<String> = limits
        .totals
        .iter()
        .filter_map(|(resource, t)| Some(format!("{resource}≤{}", text(t.maximum.as_ref()?))))
        .collect();
    if let Some(s) = limits.max_active_deadline_seconds {
        run.push(format!("deadline≤{s}s"));
    }
    if let Some(h) = queue.guardrails.cost_ceiling.max_gpu_hours {
        run.push(format!("{h} GPU-h"));
    }
    let join = |parts: Vec<String>| {
        if parts.is_empty() {
            "-".to_string()
        } else {
            parts.join(",")
        }
    };
    (join(pod), join(run))
}

/// The config's queues as LaunchQueue manifests, in name order.
pub fn manifests(config: &Config) -> Vec<Value> {
    config
        .queues
        .iter()
        .map(|(name, queue)| {
            json!({
                "apiVersion": api_version(),
                "kind": KIND,
                "metadata": {"name": name},
                "spec": serde_json::to_value(queue).unwrap_or_else(|_| json!({})),
            })
        })
        .collect()
}

/// The CustomResourceDefinition of LaunchQueues: cluster-scoped, `spec` the schema of a queue
/// of the config (generated from the same types as the config reference, made structural),
/// `status` launchgate's, and the printer columns `kubectl get lq` shows.
pub fn crd() -> Value {
    let schema = json_schema::config_json_schema();
    let definitions = schema
        .get("definitions")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let spec = structural(
        &json!({"$ref": "#/definitions/QueueConfig"}),
        &definitions,
        0,
    );
    let condition = json!({
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "observedGeneration": {"type": "integer"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    });
    let status = json!({
        "type": "object",
        "description": "What launchgate serves of this queue, written by one replica.",
        "properties": {
            "observedGeneration": {"type": "integer", "description": "The generation of the spec the conditions are about."},
            "conditions": {
                "type": "array",
                "description": "Ready: this generation is enforced. Enforcing: the queue is enforced (maybe an earlier generation). Degraded: this generation is not enforced (a config error, the native admission policies), and why.",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "enforcedGeneration": {"type": "integer", "description": "The generation of the spec launchgate enforces."},
            "perPod": {"type": "string", "description": "What it caps per pod, in short."},
            "perRun": {"type": "string", "description": "What it caps per run, in short."},
            "violations": {
                "type": "object",
                "description": "The last `launchgate audit` of the cluster: how many workloads of this queue break its rules, and the first few.",
                "properties": {
                    "total": {"type": "integer"},
                    "auditTime": {"type": "string", "format": "date-time"},
                    "items": {"type": "array", "maxItems": 20, "items": {
                        "type": "object",
                        "properties": {
                            "kind": {"type": "string"},
                            "namespace": {"type": "string"},
                            "name": {"type": "string"},
                            "rule": {"type": "string"},
                            "message": {"type": "string"},
                        },
                    }},
                },
            },
        },
    });
    let column = |name: &str, path: &str, description: &str| json!({"name": name, "type": "string", "jsonPath": path, "description": description});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{PLURAL}.{GROUP}"),
            "labels": {"app.kubernetes.io/name": "launchgate"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "plural": PLURAL,
                "singular": KIND.to_lowercase(),
                "kind": KIND,
                "listKind": format!("{KIND}List"),
                "shortNames": [SHORT_NAME],
                "categories": ["launchgate"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    column("Enforcement", ".spec.limits.enforcement", "What a violation of the limits does: deny (unset), warn or audit"),
                    column("Kueue", ".spec.kueue.localQueue", "The Kueue LocalQueue the queue hands its workloads to"),
                    column("Per pod", ".status.perPod", "What it caps per pod"),
                    column("Per run", ".status.perRun", "What it caps per run"),
                    column("Ready", ".status.conditions[?(@.type==\"Ready\")].status", "This generation is enforced"),
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A launchgate queue: W&B Launch runs submitted to it are held to its limits and mutated by its settings. The object's name is the queue's name; spec is exactly a queue of launchgate's config file (queues.<name>), and a LaunchQueue overrides the file's queue of the same name.",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status,
                    },
                }},
            }],
        },
    })
}

/// `schema` (a node of the config's JSON Schema, its `$ref`s into `definitions`) as a
/// structural schema of a CRD: references inlined, `null` alternatives as `nullable`, one
/// integer-or-string as `x-kubernetes-int-or-string`, a choice among constants as an `enum`;
/// what a structural schema cannot say (a choice of other types) keeps any value
/// (`x-kubernetes-preserve-unknown-fields`), left to launchgate's own checks. Defaults are
/// not copied: a LaunchQueue stores what was written, as the file does.
fn structural(schema: &Value, definitions: &Map<String, Value>, depth: usize) -> Value {
    let any = |description: Option<&Value>| {
        let mut out = json!({"x-kubernetes-preserve-unknown-fields": true});
        if let Some(d) = description {
            out["description"] = d.clone();
        }
        out
    };
    let Some(node) = schema.as_object() else {
        return any(None);
    };
    if depth > 32 {
        return any(node.get("description"));
    }
    let description = node.get("description");
    let with_description = |mut out: Value| {
        if let (Some(d), Some(map)) = (description, out.as_object_mut()) {
            map.insert("description".into(), d.clone());
        }
        out
    };
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let name = reference.trim_start_matches("#/definitions/");
        let target = definitions.get(name).cloned().unwrap_or(Value::Null);
        return with_description(structural(&target, definitions, depth + 1));
    }
    if let Some([one]) = node
        .get("allOf")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    {
        return with_description(structural(one, definitions, depth + 1));
    }
    for key in ["anyOf", "oneOf"] {
        let Some(choices) = node.get(key).and_then(Value::as_array) else {
            continue;
        };
        let (nulls, others): (Vec<&Value>, Vec<&Value>) = choices
            .iter()
            .partition(|c| c.get("type").and_then(Value::as_str) == Some("null"));
        if let [one] = others.as_slice() {
            let mut out = structural(one, definitions, depth + 1);
            if !nulls.is_empty() {
                out["nullable"] = json!(true);
            }
            return with_description(out);
        }
        let constants: Option<Vec<Value>> = others
            .iter()
            .map(|c| {
                c.get("const")
                    .map(|v| vec![v.clone()])
                    .or_else(|| c.get("enum").and_then(Value::as_array).cloned())
            })
            .collect::<Option<Vec<Vec<Value>>>>()
            .map(|all| all.into_iter().flatten().collect());
        if let Some(values) = constants.filter(|v| v.iter().all(Value::is_string)) {
            let mut out = json!({"type": "string", "enum": values});
            if !nulls.is_empty() {
                out["nullable"] = json!(true);
            }
            return with_description(out);
        }
        let types: Vec<&str> = others
            .iter()
            .filter_map(|c| c.get("type").and_then(Value::as_str))
            .collect();
        if types.len() == others.len() && types.iter().all(|t| ["integer", "string"].contains(t)) {
            return with_description(json!({"x-kubernetes-int-or-string": true}));
        }
        return any(description);
    }
    let (ty, nullable) = match node.get("type") {
        Some(Value::String(t)) => (Some(t.as_str()), false),
        Some(Value::Array(ts)) => {
            let named: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            let others: Vec<&str> = named.iter().copied().filter(|t| *t != "null").collect();
            match others.as_slice() {
                [one] => (Some(*one), named.len() > others.len()),
                _ => return any(description),
            }
        }
        _ => (None, false),
    };
    if let Some(value) = node.get("const") {
        return with_description(match value {
            Value::String(_) => json!({"type": "string", "enum": [value]}),
            _ => any(None),
        });
    }
    let Some(ty) = ty else {
        return any(description);
    };
    let mut out = Map::new();
    out.insert("type".into(), json!(ty));
    if nullable {
        out.insert("nullable".into(), json!(true));
    }
    for key in [
        "description",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "pattern",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "required",
    ] {
        if let Some(v) = node.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    // A nullable enum lists null among its values in JSON Schema; a CRD says `nullable`.
    if let Some(Value::Array(values)) = out.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    match ty {
        "object" => {
            if let Some(props) = node.get("properties").and_then(Value::as_object) {
                let props: Map<String, Value> = props
                    .iter()
                    .map(|(k, v)| (k.clone(), structural(v, definitions, depth + 1)))
                    .collect();
                out.insert("properties".into(), Value::Object(props));
            }
            match node.get("additionalProperties") {
                Some(Value::Object(_)) if !out.contains_key("properties") => {
                    let values = structural(&node["additionalProperties"], definitions, depth + 1);
                    out.insert("additionalProperties".into(), values);
                }
                Some(Value::Bool(true)) | None if !out.contains_key("properties") => {
                    out.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
                }
                _ => {}
            }
        }
        "array" => {
            let items = node.get("items").cloned().unwrap_or(Value::Null);
            out.insert("items".into(), structural(&items, definitions, depth + 1));
        }
        _ => {}
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lq(spec: Value) -> Value {
        json!({"apiVersion": "launchgate.io/v1alpha1", "kind": "LaunchQueue",
            "metadata": {"name": "lq-small", "generation": 3}, "spec": spec})
    }

    fn base() -> Config {
        serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).unwrap()
    }

    /// A LaunchQueue is a queue of the config by its name; a wrong key is named on the object.
    #[test]
    fn a_launchqueue_is_a_queue_named_by_the_object() {
        let spec = json!({"limits": {"fields": [{"path": "containers[*].resources.limits[\"nvidia.com/gpu\"]", "type": "integer", "maximum": 1}]}});
        let q = parse(&lq(spec.clone())).unwrap();
        assert_eq!((q.name.as_str(), q.generation), ("lq-small", 3));
        check(&base(), &q).unwrap();
        let policy = Policy::from_config(merged(base(), &[q])).unwrap();
        assert!(policy.queues.contains_key("lq-small"));

        let mut lots = spec.clone();
        lots["limits"]["fields"][0]["maximum"] = json!("lots");
        let e = parse(&lq(lots))
            .and_then(|q| check(&base(), &q))
            .unwrap_err();
        assert!(e.0[0].path.starts_with("spec.limits.fields"), "{e}");
        assert!(e.to_string().contains("lots"), "{e}");
        // Checked against a loaded policy's config too (what the webhook holds).
        let served = Policy::from_yaml(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
        check(&served.config, &parse(&lq(spec.clone())).unwrap()).unwrap();
        let typo = parse(&lq(json!({"limts": {}}))).unwrap_err();
        assert!(typo.to_string().contains("limts"), "{typo}");
        let unnamed =
            json!({"apiVersion": "launchgate.io/v1alpha1", "kind": "LaunchQueue", "metadata": {}});
        assert_eq!(parse(&unnamed).unwrap_err().0[0].path, "metadata.name");
        assert!(parse(&json!({"apiVersion": "v1", "kind": "Pod"})).is_err());
    }

    /// A spec that does not hold is named on the object and never replaces the last good one;
    /// a LaunchQueue deleted leaves the served queues.
    #[test]
    fn an_invalid_change_keeps_the_last_good_spec() {
        let good = lq(json!({"limits": {"enforcement": "warn"}}));
        let mut last = BTreeMap::new();
        let r = resolve(&base(), std::slice::from_ref(&good), &mut last);
        assert!(r.invalid.is_empty());
        assert_eq!(r.served.len(), 1);
        let bad = lq(json!({"limits": {"enforcement": "sometimes"}}));
        let r = resolve(&base(), &[bad], &mut last);
        let why = r.invalid["lq-small"].to_string();
        assert!(why.starts_with("spec.limits.enforcement"), "{why}");
        assert_eq!(r.served.len(), 1, "the last good spec is served");
        let r = resolve(&base(), &[], &mut last);
        assert!(r.served.is_empty() && last.is_empty());
    }

    /// The printer columns' caps name each bound by its last key.
    #[test]
    fn caps_are_short() {
        let q = parse(&lq(json!({
            "limits": {
                "variables": {"gpus": {"type": "integer", "maximum": 4}},
                "fields": [{"path": "containers[*].resources.limits[\"nvidia.com/gpu\"]", "maximum": 1}],
                "totals": {"nvidia.com/gpu": {"maximum": 16}},
                "maxActiveDeadlineSeconds": 86400},
            "guardrails": {"costCeiling": {"maxGpuHours": 192}}})))
        .unwrap();
        assert_eq!(
            caps(&q.spec),
            (
                "gpus≤4,nvidia.com/gpu≤1".to_string(),
                "nvidia.com/gpu≤16,deadline≤86400s,192 GPU-h".to_string()
            )
        );
        let none = parse(&lq(json!({}))).unwrap();
        assert_eq!(caps(&none.spec), ("-".to_string(), "-".to_string()));
    }

    /// The config's queues, as manifests, read back as the same queues.
    #[test]
    fn the_configs_queues_become_launchqueues() {
        let config = base();
        let manifests = manifests(&config);
        assert_eq!(manifests.len(), config.queues.len());
        for m in &manifests {
            let q = parse(m).unwrap();
            assert_eq!(
                serde_json::to_value(&q.spec).unwrap(),
                serde_json::to_value(&config.queues[&q.name]).unwrap()
            );
        }
    }

    /// The CRD's spec schema is structural: every node has a type, or keeps any value, or is
    /// an integer or a string; no reference, choice or default is left.
    #[test]
    fn the_crd_schema_is_structural() {
        let crd = crd();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        fn walk(node: &Value, path: &str) {
            let map = node.as_object().unwrap_or_else(|| panic!("{path}: {node}"));
            for key in [
                "$ref", "anyOf", "oneOf", "allOf", "default", "format", "const",
            ] {
                assert!(!map.contains_key(key), "{path}: {key} in {node}");
            }
            assert!(
                map.contains_key("type")
                    || map.contains_key("x-kubernetes-preserve-unknown-fields")
                    || map.contains_key("x-kubernetes-int-or-string"),
                "{path}: no type: {node}"
            );
            for (k, v) in map
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                walk(v, &format!("{path}.{k}"));
            }
            if let Some(items) = map.get("items") {
                walk(items, &format!("{path}[]"));
            }
            if let Some(values) = map.get("additionalProperties").filter(|v| v.is_object()) {
                walk(values, &format!("{path}.*"));
            }
        }
        walk(spec, "spec");
        // Every key of a queue in the config is a key of the spec.
        let config = json_schema::config_json_schema();
        let queue = &config["definitions"]["QueueConfig"]["properties"];
        let keys: Vec<&String> = queue.as_object().unwrap().keys().collect();
        let spec_keys: Vec<&String> = spec["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, spec_keys);
    }
}
