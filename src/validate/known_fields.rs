//! Does a path name a field the workload kind really has?
//!
//! A `fields` path or template position with a typo (`resources.limit.cpu`) or a field of
//! another kind (`spec.replicas` on a batch/v1 Job) designates nothing in any workload, so its
//! limit would never be checked — the config would say `ok` and enforce nothing. Such paths
//! are config errors. The truth is the Kubernetes API types launchgate already depends on
//! (k8s-openapi, through their JSON schemas): a Pod template for positions inside a pod
//! template, a Pod or a batch/v1 Job for positions at a workload's root (the kinds k8s-openapi
//! has a type for, by apiVersion and kind). The other kinds (Volcano Jobs, PyTorchJobs…)
//! have no typed schema here: their root positions are not checked.

use super::path::Segment;
use crate::workload::WorkloadKind;
use serde_json::Value;
use std::sync::OnceLock;

/// The Kubernetes API types paths are checked against — `PodTemplateSpec`, `Pod` and batch/v1
/// `Job`, each beside the definitions they share in `$defs` — as k8s-openapi's JSON schemas
/// reduced to their structure (fields, items, maps, references, scalar types). Generated from
/// the types by the test `the_field_tree_is_k8s_openapis` (`UPDATE_FIELDS=1` rewrites it), so the
/// serving process carries neither the schema generator nor the schemas' descriptions.
const API_FIELDS: &str = include_str!("api_fields.json");

fn api_fields() -> &'static Value {
    static FIELDS: OnceLock<Value> = OnceLock::new();
    FIELDS.get_or_init(|| serde_json::from_str(API_FIELDS).unwrap_or(Value::Null))
}

/// What a walk down a schema found.
#[derive(Debug, PartialEq, Eq)]
enum Walk {
    /// Every segment is a field (or the schema cannot tell, e.g. a free-form object).
    Known,
    /// The segment at this index is not a field where it stands.
    UnknownAt(usize),
}

/// Follows `$ref`s into the root's definitions.
fn resolve<'a>(root: &'a Value, mut schema: &'a Value) -> &'a Value {
    for _ in 0..32 {
        let Some(r) = schema.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let name = r.rsplit('/').next().unwrap_or_default();
        match root
            .get("$defs")
            .or_else(|| root.get("definitions"))
            .and_then(|d| d.get(name))
        {
            Some(next) => schema = next,
            None => break,
        }
    }
    schema
}

fn walk(root: &Value, schema: &Value, path: &[Segment], at: usize) -> Walk {
    let schema = resolve(root, schema);
    let Some((first, rest)) = path.split_first() else {
        return Walk::Known;
    };
    // Alternatives (`Option<T>` is `anyOf [T, null]`): known if any alternative knows it.
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(alternatives) = schema.get(key).and_then(Value::as_array) {
            // Otherwise the alternative that goes furthest says where it stops.
            return alternatives
                .iter()
                .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
                .map(|a| walk(root, a, path, at))
                .max_by_key(|w| match w {
                    Walk::UnknownAt(i) => *i,
                    Walk::Known => usize::MAX,
                })
                .unwrap_or(Walk::Known);
        }
    }
    match first {
        Segment::Key(k) => {
            if let Some(field) = schema.get("properties").and_then(|p| p.get(k)) {
                return walk(root, field, rest, at + 1);
            }
            match schema.get("additionalProperties") {
                Some(Value::Object(_)) => walk(root, &schema["additionalProperties"], rest, at + 1),
                Some(Value::Bool(true)) => Walk::Known,
                _ if schema.get("properties").is_some() => Walk::UnknownAt(at),
                // A scalar (string, number, quantity…) has no fields; a schema without a
                // shape cannot tell.
                _ if has_scalar_type(schema) => Walk::UnknownAt(at),
                _ => Walk::Known,
            }
        }
        Segment::Index(_) | Segment::AnyIndex => match schema.get("items") {
            Some(items) => walk(root, items, rest, at + 1),
            None if has_scalar_type(schema) || schema.get("properties").is_some() => {
                Walk::UnknownAt(at)
            }
            None => Walk::Known,
        },
    }
}

fn has_scalar_type(schema: &Value) -> bool {
    let scalar = |t: &str| matches!(t, "string" | "integer" | "number" | "boolean");
    match schema.get("type") {
        Some(Value::String(t)) => scalar(t),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .all(|t| scalar(t) || t == "null"),
        _ => false,
    }
}

/// The typed schema a path is checked against: a pod template for `in_pod_template`, else the
/// root of `kind` (`None` when launchgate has no typed schema for it).
/// The type a path of `kind` is checked against: a pod template's inside one, else the kind's
/// own when it is a type k8s-openapi has.
fn schema_for(kind: Option<WorkloadKind>, in_pod_template: bool) -> Option<&'static Value> {
    let name = if in_pod_template {
        "PodTemplateSpec"
    } else {
        use k8s_openapi::Resource;
        use k8s_openapi::api::{batch::v1::Job, core::v1::Pod};
        let kind = kind?;
        [(Pod::API_VERSION, Pod::KIND), (Job::API_VERSION, Job::KIND)]
            .into_iter()
            .find(|(version, name)| kind.api_version() == *version && kind.api_kind() == *name)?
            .1
    };
    api_fields().get(name)
}

pub(super) fn unknown_from(
    kind: Option<WorkloadKind>,
    in_pod_template: bool,
    path: &[Segment],
) -> Option<usize> {
    let schema = schema_for(kind, in_pod_template)?;
    match walk(api_fields(), schema, path, 0) {
        Walk::Known => None,
        Walk::UnknownAt(i) => Some(i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::path::FieldPath;

    /// `schema` with only what a walk reads.
    fn structure(schema: &Value) -> Value {
        let Value::Object(map) = schema else {
            return schema.clone();
        };
        let each = |v: &Value| match v {
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| (k.clone(), structure(v))).collect())
            }
            other => other.clone(),
        };
        map.iter()
            .filter_map(|(key, v)| {
                let kept = match key.as_str() {
                    "properties" | "$defs" => each(v),
                    "items" | "additionalProperties" => structure(v),
                    "anyOf" | "oneOf" | "allOf" => {
                        Value::Array(v.as_array()?.iter().map(structure).collect())
                    }
                    "type" | "$ref" => v.clone(),
                    _ => return None,
                };
                Some((key.clone(), kept))
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// The field tree, from k8s-openapi's types (a dev-dependency feature: the product does not
    /// carry the generator).
    fn field_tree() -> Value {
        fn root<T: schemars::JsonSchema>(defs: &mut serde_json::Map<String, Value>) -> Value {
            let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
            let mut schema = structure(&serde_json::to_value(schema).unwrap());
            let own = schema.as_object_mut().unwrap().remove("$defs");
            for (name, def) in own.and_then(|d| d.as_object().cloned()).unwrap_or_default() {
                let before = defs.insert(name.clone(), def.clone());
                assert!(before.is_none_or(|b| b == def), "two definitions of {name}");
            }
            schema
        }
        use k8s_openapi::api::{batch::v1::Job, core::v1::Pod, core::v1::PodTemplateSpec};
        let mut defs = serde_json::Map::new();
        let mut tree = serde_json::Map::new();
        tree.insert("PodTemplateSpec".into(), root::<PodTemplateSpec>(&mut defs));
        tree.insert("Pod".into(), root::<Pod>(&mut defs));
        tree.insert("Job".into(), root::<Job>(&mut defs));
        tree.insert("$defs".into(), Value::Object(defs));
        Value::Object(tree)
    }

    #[test]
    fn the_field_tree_is_k8s_openapis() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/validate/api_fields.json");
        let tree = serde_json::to_string(&field_tree()).unwrap() + "\n";
        if std::env::var_os("UPDATE_FIELDS").is_some() {
            std::fs::write(path, &tree).unwrap();
            return;
        }
        assert!(
            API_FIELDS == tree,
            "src/validate/api_fields.json is not k8s-openapi's field tree: run UPDATE_FIELDS=1 cargo test --lib the_field_tree"
        );
    }

    fn unknown(kind: Option<WorkloadKind>, in_template: bool, path: &str) -> Option<usize> {
        unknown_from(kind, in_template, &FieldPath::parse(path).unwrap().0)
    }

    #[test]
    fn pod_template_paths_follow_the_pod_schema() {
        for ok in [
            "spec.containers[*].resources.limits.cpu",
            "spec.containers[0].resources.limits[\"nvidia.com/gpu\"]",
            "spec.containers[*].image",
            "spec.initContainers[*].env[*].value",
            "spec.nodeSelector.pool",
            "metadata.labels.team",
            "spec.activeDeadlineSeconds",
            "spec.restartPolicy",
        ] {
            assert_eq!(unknown(None, true, ok), None, "{ok}");
        }
        // `limit` for `limits`: the fifth segment is unknown.
        assert_eq!(
            unknown(None, true, "spec.containers[*].resources.limit.cpu"),
            Some(4)
        );
        assert_eq!(unknown(None, true, "spec.container[*].image"), Some(1));
        // Below a scalar: nothing.
        assert_eq!(unknown(None, true, "spec.containers[*].image.tag"), Some(4));
    }

    #[test]
    fn root_paths_follow_the_kind() {
        assert_eq!(
            unknown(Some(WorkloadKind::BatchJob), false, "spec.parallelism"),
            None
        );
        assert_eq!(
            unknown(Some(WorkloadKind::BatchJob), false, "spec.replicas"),
            Some(1)
        );
        assert_eq!(
            unknown(
                Some(WorkloadKind::BatchJob),
                false,
                "spec.activeDeadlineSeconds"
            ),
            None
        );
        assert_eq!(
            unknown(Some(WorkloadKind::Pod), false, "spec.nodeName"),
            None
        );
        // No typed schema for custom resources: not checked.
        assert_eq!(
            unknown(Some(WorkloadKind::VolcanoJob), false, "spec.whatever"),
            None
        );
        assert_eq!(unknown(None, false, "spec.whatever"), None);
    }
}
