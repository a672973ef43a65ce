//! Reading manifests for the offline CLI: YAML or JSON, multi-document, bare objects or
//! AdmissionReviews, and `kind: List`.

use crate::admission::{ADMISSION_KIND, AdmissionRequest};
use crate::review::{RequestError, parse_request};
use serde::Deserialize;
use serde_json::Value;

/// One input document: an object to treat as a CREATE, or a full admission request.
#[derive(Debug, Clone)]
pub enum InputDocument {
    Object(Value),
    Review(Box<AdmissionRequest>),
}

/// Parses YAML or JSON text into documents. Empty documents are skipped; `kind: List` items
/// are expanded.
pub fn parse_documents(text: &str) -> Result<Vec<InputDocument>, String> {
    let mut values = Vec::new();
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        for v in stream {
            values.push(v.map_err(|e| format!("invalid JSON: {e}"))?);
        }
    } else {
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let v = Value::deserialize(doc).map_err(|e| format!("document {}: {e}", i + 1))?;
            values.push(v);
        }
    }
    let mut out = Vec::new();
    for v in values {
        collect(v, &mut out)?;
    }
    Ok(out)
}

fn collect(v: Value, out: &mut Vec<InputDocument>) -> Result<(), String> {
    match &v {
        Value::Null => Ok(()),
        Value::Array(items) => items.iter().try_for_each(|item| collect(item.clone(), out)),
        Value::Object(map) => {
            let kind = map.get("kind").and_then(Value::as_str);
            if kind == Some(ADMISSION_KIND) {
                let bytes = serde_json::to_vec(&v).map_err(|e| e.to_string())?;
                let req = parse_request(&bytes).map_err(|RequestError(e)| e)?;
                out.push(InputDocument::Review(Box::new(req)));
            } else if kind == Some("List") {
                let items = map.get("items").and_then(Value::as_array);
                items
                    .into_iter()
                    .flatten()
                    .try_for_each(|item| collect(item.clone(), out))?;
            } else {
                out.push(InputDocument::Object(v));
            }
            Ok(())
        }
        _ => Err("a document must be an object".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_doc_yaml_and_lists() {
        let docs = parse_documents(
            "a: 1\nkind: Pod\n---\n---\nkind: List\nitems: [{kind: Job}, {kind: Pod}]\n",
        )
        .unwrap();
        assert_eq!(docs.len(), 3);
    }

    #[test]
    fn json_and_review() {
        let docs = parse_documents(r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{}}}"#).unwrap();
        assert!(matches!(docs[0], InputDocument::Review(_)));
        assert!(parse_documents("{").is_err());
        assert!(parse_documents("- 1\n").is_err());
    }
}
