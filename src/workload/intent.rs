//! Did the user write this field, or did the API server default it?
//!
//! The API server defaults built-in objects *before* mutating admission (`backoffLimit: 6`,
//! `dnsPolicy: ClusterFirst`, …), so "absent" cannot be read off a Job or Pod. Two records say
//! what the user actually wrote:
//!
//! * kubectl's client-side apply annotation `kubectl.kubernetes.io/last-applied-configuration`
//!   (the whole applied object);
//! * server-side apply (`kubectl apply --server-side`, Flux, Argo CD): `metadata.managedFields`
//!   entries with `operation: Apply` own exactly the fields of the applied configuration
//!   (`fieldsV1` like `{"f:spec":{"f:backoffLimit":{}}}`).
//!
//! `operation: Update` entries (kubectl create, controllers) also list defaulted fields and say
//! nothing about intent. Custom resources (Volcano Jobs, PyTorchJobs) are not defaulted by the
//! API server, so there a present field is always the user's (see [`UserIntent::wrote`] callers).

use crate::json::{self, Pointer as _};
use crate::workload;
use serde_json::Value;
use std::borrow::Cow;

/// kubectl's client-side apply record.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What the user wrote, as far as the object records it.
#[derive(Debug, Clone, Default)]
pub struct UserIntent {
    last_applied: Option<Value>,
    /// `fieldsV1` of every `operation: Apply` manager of the main resource.
    applied_fields: Vec<Value>,
}

impl UserIntent {
    /// Reads the intent records of an object (or pod template with `metadata`).
    pub fn of(object: &Value) -> Self {
        let Some(map) = object.as_object() else {
            return Self::default();
        };
        let last_applied = workload::annotation(map, LAST_APPLIED_ANNOTATION)
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .filter(Value::is_object);
        let applied_fields = object
            .at("/metadata/managedFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|entry| entry.get("operation").and_then(Value::as_str) == Some("Apply"))
            .filter(|entry| {
                entry
                    .get("subresource")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            })
            .filter_map(|entry| json::field_set(entry.get("fieldsV1")?))
            .map(Cow::into_owned)
            .collect();
        UserIntent {
            last_applied,
            applied_fields,
        }
    }

    /// True when the object carries a record of what the user wrote (a client-side or
    /// server-side apply). Without one, nothing can be told apart from an API default.
    pub fn has_records(&self) -> bool {
        self.last_applied.is_some() || !self.applied_fields.is_empty()
    }

    /// True when a record shows the user wrote the field at `path` (field names from the
    /// object root, e.g. `["spec", "template", "spec", "dnsPolicy"]`).
    pub fn wrote(&self, path: &[&str]) -> bool {
        let in_last_applied = self.last_applied.as_ref().is_some_and(|applied| {
            path.iter()
                .try_fold(applied, |v, key| v.get(*key))
                .is_some()
        });
        in_last_applied
            || self.applied_fields.iter().any(|fields| {
                path.iter()
                    .try_fold(fields, |v, key| v.get(format!("f:{key}")))
                    .is_some()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(managed: Value, annotations: Value) -> Value {
        json!({"metadata": {"annotations": annotations, "managedFields": managed},
               "spec": {"backoffLimit": 6}})
    }

    #[test]
    fn server_side_apply_owner_is_the_user() {
        let j = job(
            json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "batch/v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:backoffLimit": {}, "f:template": {"f:spec": {"f:dnsPolicy": {}}}}}}]),
            json!({}),
        );
        let i = UserIntent::of(&j);
        assert!(i.wrote(&["spec", "backoffLimit"]));
        assert!(i.wrote(&["spec", "template", "spec", "dnsPolicy"]));
        assert!(!i.wrote(&["spec", "completions"]));
    }

    #[test]
    fn a_field_set_kept_as_text_reads_as_its_tree() {
        let text = r#"{"f:spec": {"f:backoffLimit": {}}}"#;
        let j = job(
            json!([{"manager": "kubectl", "operation": "Apply", "fieldsV1": text},
                   {"manager": "x", "operation": "Apply", "fieldsV1": "f:spec"}]),
            json!({}),
        );
        let i = UserIntent::of(&j);
        assert!(i.wrote(&["spec", "backoffLimit"]));
        assert!(!i.wrote(&["spec", "completions"]));
    }

    #[test]
    fn update_managers_and_status_apply_say_nothing() {
        let j = job(
            json!([
                {"manager": "kubectl-create", "operation": "Update", "fieldsV1": {"f:spec": {"f:backoffLimit": {}}}},
                {"manager": "ctl", "operation": "Apply", "subresource": "status", "fieldsV1": {"f:spec": {"f:backoffLimit": {}}}}
            ]),
            json!({}),
        );
        assert!(!UserIntent::of(&j).wrote(&["spec", "backoffLimit"]));
    }

    #[test]
    fn last_applied_configuration_counts() {
        let j = job(
            json!([]),
            json!({LAST_APPLIED_ANNOTATION: r#"{"spec":{"backoffLimit":6}}"#}),
        );
        assert!(UserIntent::of(&j).wrote(&["spec", "backoffLimit"]));
        let j = job(json!([]), json!({LAST_APPLIED_ANNOTATION: "not json"}));
        assert!(!UserIntent::of(&j).wrote(&["spec", "backoffLimit"]));
        assert!(!UserIntent::of(&json!(null)).wrote(&["spec"]));
        assert!(!UserIntent::of(&json!({"metadata": {"managedFields": 3}})).wrote(&["spec"]));
    }
}
