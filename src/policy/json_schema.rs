//! The JSON Schema of the config file, generated from the config types (their serde
//! attributes and doc comments), so tools that validate the config before launchgate reads
//! it — the Helm chart's `values.schema.json` under `config` — reject exactly what
//! [`Policy::from_yaml`](super::Policy::from_yaml) rejects by shape: unknown keys, wrong
//! types, unknown enum values. (Checks across keys, e.g. a template's kind, stay in
//! `check-config`.)

use super::Config;
use crate::pytorch::{IndexedJobs, NprocPerNode, QuantityText};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;
use std::borrow::Cow;

/// The config's JSON Schema (draft-07), its subschemas under `definitions` and referenced
/// as `#/definitions/<Name>`.
pub fn config_json_schema() -> Value {
    let generator = SchemaSettings::draft07().into_generator();
    let mut schema = generator.into_root_schema_for::<Config>().to_value();
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
    }
    schema
}

/// How to regenerate the chart's schema after changing a config type.
pub const REGENERATE_HINT: &str = "UPDATE_SCHEMA=1 cargo test --test config_schema regenerates charts/launchgate/values.schema.json, charts/launchgate/files/kinds.json, charts/launchgate/files/intermediates.json, charts/launchgate/files/label-carriers.json, charts/launchgate/files/native-slot.json and the LaunchQueue CRD (charts/launchgate/crds/, manifests/)";

/// The Helm chart's `values.schema.json` with its `config` property replaced by the config's
/// generated schema and the config's subschemas in the root `definitions` (where the
/// `#/definitions/…` references resolve); every other value's schema is kept as written.
pub fn chart_values_schema(current: &Value) -> Value {
    let mut values = current.clone();
    let mut config = config_json_schema();
    let definitions = config
        .as_object_mut()
        .and_then(|m| m.remove("definitions"))
        .unwrap_or_else(|| Value::Object(Default::default()));
    if let Some(map) = config.as_object_mut() {
        map.remove("title");
        map.insert(
            "description".into(),
            Value::String(format!(
                "launchgate configuration (the ConfigMap's config.yaml), generated from the server's config types; {REGENERATE_HINT}."
            )),
        );
    }
    if let Some(root) = values.as_object_mut() {
        root.insert("definitions".into(), definitions);
        if let Some(props) = root.get_mut("properties").and_then(Value::as_object_mut) {
            props.insert("config".into(), config);
        }
    }
    // One switch per kind under `webhook.rules`, named by the kind's descriptor.
    if let Some(rules) = values.pointer_mut("/properties/webhook/properties/rules/properties") {
        *rules = Value::Object(
            crate::kinds::all()
                .map(|k| {
                    (
                        k.webhook_rule.to_string(),
                        serde_json::json!({"type": "boolean"}),
                    )
                })
                .collect(),
        );
    }
    values
}

impl JsonSchema for NprocPerNode {
    fn schema_name() -> Cow<'static, str> {
        "NprocPerNode".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A positive process count or \"auto\".",
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": u32::MAX},
                {"type": "string", "pattern": "^(auto|[1-9][0-9]*)$"}
            ]
        })
    }
}

impl JsonSchema for IndexedJobs {
    fn schema_name() -> Cow<'static, str> {
        "IndexedJobs".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "false (annotated Jobs only), \"auto\" (Indexed Jobs that show they are PyTorch training) or true (every Indexed Job).",
            "anyOf": [{"type": "boolean"}, {"type": "string", "enum": ["auto"]}]
        })
    }
}

impl JsonSchema for QuantityText {
    fn schema_name() -> Cow<'static, str> {
        "QuantityText".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A resource quantity (`100m`, `1`, `0.5`, `16Mi`).",
            "type": ["string", "number"]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_forbids_unknown_keys_and_names_every_queue_section() {
        let schema = config_json_schema();
        assert_eq!(schema["additionalProperties"], false, "{schema:#}");
        let queue = &schema["definitions"]["QueueConfig"];
        assert_eq!(queue["additionalProperties"], false);
        for key in [
            "securityContext",
            "jobDefaults",
            "cache",
            "pytorch",
            "limits",
        ] {
            assert!(queue["properties"].get(key).is_some(), "{key}");
        }
        assert_eq!(
            schema["definitions"]["LimitsConfig"]["properties"]["enforcement"]["allOf"][0]["$ref"],
            "#/definitions/Enforcement"
        );
    }
}
