//! AdmissionReview `admission.k8s.io/v1` wire types.
//!
//! We use our own thin types instead of `kube::core::admission::AdmissionReview<DynamicObject>`
//! for two reasons: the object must stay a raw `serde_json::Value` (a typed `ObjectMeta` round
//! trip would drop fields our k8s-openapi version does not know), and kube's `AdmissionResponse`
//! serialises `patch` as an array of numbers instead of the documented base64 string
//! (kube-rs/kube#1781). The group/version/kind and operation types are kube's.

use crate::json::Pointer as _;
use base64::Engine as _;
use kube::core::GroupVersionKind;
pub use kube::core::admission::Operation;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `apiVersion` of the only AdmissionReview version we speak.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
/// `kind` of an AdmissionReview.
pub const ADMISSION_KIND: &str = "AdmissionReview";

/// An incoming AdmissionReview (only the parts a webhook reads).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReviewRequest {
    #[serde(default)]
    /// `apiVersion`: `admission.k8s.io/v1`.
    pub api_version: Option<String>,
    #[serde(default)]
    /// `kind`: `AdmissionReview`.
    pub kind: Option<String>,
    #[serde(default)]
    /// The request (absent in a malformed review).
    pub request: Option<AdmissionRequest>,
}

/// `request` of an AdmissionReview.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Identifies this request; echoed in the response.
    pub uid: String,
    /// The kind of the object being admitted.
    pub kind: GroupVersionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The subresource (`status`, `scale`, …), when the request is for one.
    pub sub_resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The resource asked about (`pytorchjobs` for a `pytorchjobs/scale` request, whose `kind`
    /// is `autoscaling/v1 Scale`).
    pub resource: Option<Resource>,
    /// Empty on a CREATE that relies on `generateName`.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    /// The object's namespace (absent for cluster-scoped objects).
    pub namespace: Option<String>,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: Operation,
    #[serde(default, deserialize_with = "crate::json::parse_optional")]
    /// The object as it would be stored (after API-server defaulting).
    pub object: Option<Value>,
    #[serde(default, deserialize_with = "crate::json::parse_optional")]
    /// The object before an UPDATE.
    pub old_object: Option<Value>,
    /// `kubectl apply --dry-run=server`. Never changes the answer: we have no side effects.
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Who sent the request (`username`, `groups`, ...): only logged, never decides anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_info: Option<Value>,
}

/// `request.resource`: the group, version and plural name of the resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Resource {
    /// API group (empty for the core group).
    #[serde(default)]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Plural resource name (`pods`, `pytorchjobs`).
    #[serde(default)]
    pub resource: String,
}

/// The namespace an offline tool places a bare object in: `namespace` when given (`-n`), else
/// the object's own (`None`: it names none).
pub fn placed_namespace<'a>(object: &'a Value, namespace: Option<&'a str>) -> Option<&'a str> {
    namespace.or_else(|| {
        object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    })
}

/// The namespace of an object that names none (as the API server and `kubectl` place it).
pub const DEFAULT_NAMESPACE: &str = "default";

impl AdmissionRequest {
    /// The object's namespace, where its pods' claims are: the request's, else the object's,
    /// else `default`.
    pub fn namespace_of<'v>(&'v self, object: &'v Value) -> &'v str {
        self.namespace
            .as_deref()
            .or_else(|| {
                object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
            })
            .unwrap_or(DEFAULT_NAMESPACE)
    }

    /// True when the request is judged as a CREATE, given `admitted`, the old object when
    /// launchgate admitted it in the queue: a CREATE, or an UPDATE of what it did not admit
    /// there (an UPDATE that brings the object into the queue, or one of an exempt workload
    /// from a requester its exemption does not cover).
    pub fn judged_as_create(&self, admitted: Option<&Value>) -> bool {
        match self.operation {
            Operation::Create => true,
            Operation::Update => admitted.is_none(),
            _ => false,
        }
    }

    /// The object's name: `request.name`, else `metadata.name` (empty with `generateName`).
    pub fn object_name<'v>(&'v self, object: &'v Value) -> &'v str {
        if !self.name.is_empty() {
            return &self.name;
        }
        object
            .at("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// A synthetic CREATE request for an object read from a file (the offline CLI).
    pub fn synthetic_create(object: Value, namespace: Option<&str>) -> Result<Self, String> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or("object has no apiVersion")?;
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .ok_or("object has no kind")?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let namespace = placed_namespace(&object, namespace).map(str::to_string);
        Ok(AdmissionRequest {
            uid: "launchgate-cli".into(),
            kind: GroupVersionKind {
                group: group.to_string(),
                version: version.to_string(),
                kind: kind.to_string(),
            },
            sub_resource: None,
            resource: None,
            name,
            namespace,
            operation: Operation::Create,
            object: Some(object),
            old_object: None,
            dry_run: Some(false),
            user_info: None,
        })
    }

    /// `userInfo.username`, empty when absent.
    pub fn username(&self) -> &str {
        self.user_info
            .as_ref()
            .and_then(|u| u.get("username"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// Wraps this request into an AdmissionReview JSON document.
    pub fn to_review_json(&self) -> Value {
        serde_json::json!({
            "apiVersion": ADMISSION_API_VERSION,
            "kind": ADMISSION_KIND,
            "request": self,
        })
    }
}

/// `response.status` on a denial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseStatus {
    /// HTTP-style status code of a denial (403).
    pub code: u16,
    /// Why the request was denied, shown to the client.
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A machine-readable reason, when there is one.
    pub reason: Option<String>,
}

/// `response` of an AdmissionReview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    /// The request's `uid`.
    pub uid: String,
    /// Whether the request may proceed.
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Why it was denied.
    pub status: Option<ResponseStatus>,
    /// Base64 of the RFC 6902 JSON Patch, as the API documents it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `JSONPatch` when `patch` is set.
    pub patch_type: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// Shown to the client as `Warning: …` (kubectl) even when allowed.
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    /// Written to the API server's audit log.
    pub audit_annotations: BTreeMap<String, String>,
}

impl AdmissionResponse {
    /// Allows the request unchanged.
    pub fn allow(uid: &str) -> Self {
        AdmissionResponse {
            uid: uid.to_string(),
            allowed: true,
            status: None,
            patch: None,
            patch_type: None,
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
        }
    }

    /// Denies the request with `message`.
    pub fn deny(uid: &str, message: String) -> Self {
        AdmissionResponse {
            allowed: false,
            status: Some(ResponseStatus {
                code: 403,
                message,
                reason: Some("Forbidden".into()),
            }),
            ..Self::allow(uid)
        }
    }

    /// Attaches a JSON Patch; an empty patch attaches nothing.
    pub fn with_patch(mut self, patch: &json_patch::Patch) -> Self {
        if !patch.0.is_empty() {
            let bytes = serde_json::to_vec(patch).expect("a JSON Patch always serialises");
            self.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
            self.patch_type = Some("JSONPatch".into());
        }
        self
    }

    /// Decodes the attached patch, if any.
    pub fn decoded_patch(&self) -> Option<Result<json_patch::Patch, String>> {
        let b64 = self.patch.as_ref()?;
        Some(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string())),
        )
    }
}

/// The outgoing AdmissionReview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReviewResponse {
    /// `admission.k8s.io/v1`.
    pub api_version: String,
    /// `AdmissionReview`.
    pub kind: String,
    /// The answer.
    pub response: AdmissionResponse,
}

impl AdmissionReviewResponse {
    /// Wraps a response in its AdmissionReview envelope.
    pub fn new(response: AdmissionResponse) -> Self {
        AdmissionReviewResponse {
            api_version: ADMISSION_API_VERSION.into(),
            kind: ADMISSION_KIND.into(),
            response,
        }
    }
}

/// The AdmissionReview JSON answering with `response`: the bytes `serde_json::to_vec` makes of
/// [`AdmissionReviewResponse::new`]`(response)`, with the patch copied in unescaped. Base64
/// has no character JSON escapes, but serde_json checks every byte of every string it writes
/// one at a time, and the patch is most of a mutation's answer.
pub fn review_response_body(response: &AdmissionResponse) -> Vec<u8> {
    /// The response's members, in [`AdmissionResponse`]'s order, but the patch.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Head<'a> {
        uid: &'a str,
        allowed: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'a ResponseStatus>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Tail<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        patch_type: Option<&'a str>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        warnings: &'a [String],
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        audit_annotations: &'a BTreeMap<String, String>,
    }
    // serde_json escapes `"`, `\\` and control characters only; base64 has none of them. The
    // check reads every byte without branching (vectorised), unlike serde_json's escaping.
    let escapes = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
    let patch = response
        .patch
        .as_deref()
        .filter(|p| !p.bytes().fold(false, |any, b| any | escapes(b)));
    let Some(patch) = patch else {
        // Something to escape (never in a patch `with_patch` made): serde_json writes it all.
        return serde_json::to_vec(&AdmissionReviewResponse::new(response.clone()))
            .expect("an AdmissionReview response always serialises");
    };
    let mut out = Vec::with_capacity(256 + patch.len());
    for part in [
        r#"{"apiVersion":""#,
        ADMISSION_API_VERSION,
        r#"","kind":""#,
        ADMISSION_KIND,
        r#"","response":"#,
    ] {
        out.extend_from_slice(part.as_bytes());
    }
    let head = Head {
        uid: &response.uid,
        allowed: response.allowed,
        status: response.status.as_ref(),
    };
    serde_json::to_writer(&mut out, &head).expect("an AdmissionReview response always serialises");
    // `{…}` of the head, reopened: `,"patch":"…"` and then the tail's members.
    out.pop();
    out.extend_from_slice(br#","patch":""#);
    out.extend_from_slice(patch.as_bytes());
    out.push(b'"');
    let tail = Tail {
        patch_type: response.patch_type.as_deref(),
        warnings: &response.warnings,
        audit_annotations: &response.audit_annotations,
    };
    let at = out.len();
    serde_json::to_writer(&mut out, &tail).expect("an AdmissionReview response always serialises");
    // The tail's `{` becomes the `,` before its members, or goes when it has none (`{}`).
    if out.len() - at == 2 {
        out.truncate(at);
        out.push(b'}');
    } else {
        out[at] = b',';
    }
    out.push(b'}');
    out
}

/// Kubernetes keeps a warning short: longer ones are truncated by the API server.
pub const MAX_WARNING_CHARS: usize = 256;
/// Total budget for all warnings of one response (runes, per `warning.go`).
pub const MAX_WARNINGS_TOTAL_CHARS: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_body_is_what_serde_json_writes() {
        let patch = json_patch::Patch(vec![json_patch::PatchOperation::Add(
            json_patch::AddOperation {
                path: json_patch::jsonptr::PointerBuf::parse("/metadata/labels/a\"b").unwrap(),
                value: serde_json::json!({"x": "ü\n\"", "n": [1, 2.5, null]}),
            },
        )]);
        let denied = AdmissionResponse::deny("u-2", "no \"quotes\"\nhere".into());
        let mut annotated = AdmissionResponse::allow("u-3").with_patch(&patch);
        annotated
            .audit_annotations
            .insert("exempted-by".into(), "ops \"team\"".into());
        let mut warned = AdmissionResponse::allow("u-4").with_patch(&patch);
        warned.warnings = vec!["first".into(), "sécond \"w\"".into()];
        let mut both = warned.clone();
        both.audit_annotations = annotated.audit_annotations.clone();
        let mut not_base64 = AdmissionResponse::allow("u-5");
        not_base64.patch = Some("a\"b".into());
        for response in [
            AdmissionResponse::allow("u-1"),
            AdmissionResponse::allow("u-1").with_patch(&patch),
            denied,
            annotated,
            warned,
            both,
            not_base64,
        ] {
            let expected =
                serde_json::to_vec(&AdmissionReviewResponse::new(response.clone())).unwrap();
            assert_eq!(
                String::from_utf8(review_response_body(&response)).unwrap(),
                String::from_utf8(expected).unwrap()
            );
        }
    }

    #[test]
    fn empty_patch_sets_neither_patch_nor_type() {
        let r = AdmissionResponse::allow("u").with_patch(&json_patch::Patch(vec![]));
        assert!(r.patch.is_none() && r.patch_type.is_none());
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("patch").is_none());
        assert!(json.get("patchType").is_none());
    }

    #[test]
    fn patch_is_base64_string() {
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::json!([{"op":"add","path":"/a","value":1}]))
                .unwrap();
        let r = AdmissionResponse::allow("u").with_patch(&patch);
        assert_eq!(r.patch_type.as_deref(), Some("JSONPatch"));
        let decoded = r.decoded_patch().unwrap().unwrap();
        assert_eq!(decoded, patch);
    }

    #[test]
    fn deny_has_403() {
        let r = AdmissionResponse::deny("u", "no".into());
        assert!(!r.allowed);
        assert_eq!(r.status.unwrap().code, 403);
    }
}
