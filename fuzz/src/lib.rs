//! Shared pieces of the fuzz targets: the embedded fixtures and policies, the checks every
//! review answer must pass, and structure-aware edits of JSON trees.

use arbitrary::{Result, Unstructured};
use launchgate::admission::{
    ADMISSION_API_VERSION, ADMISSION_KIND, AdmissionRequest, AdmissionReviewResponse,
    MAX_WARNING_CHARS, review_response_body,
};
use launchgate::cluster::NoCluster;
use launchgate::review::parse_request;
use launchgate::{Endpoint, Policy, review};
use serde_json::{Map, Number, Value, json};
use std::sync::LazyLock;

macro_rules! fixtures {
    ($($name:literal),* $(,)?) => {
        /// The recorded AdmissionReview requests (tests/fixtures/admission), by file name.
        pub const FIXTURES: &[(&str, &[u8])] = &[
            $(($name, include_bytes!(concat!("../../tests/fixtures/admission/", $name)))),*
        ];
    };
}

fixtures!(
    "create-job-ddp.json",
    "create-job-demo.json",
    "create-job-launch-acme-mnist.json",
    "create-jobset-ddp.json",
    "create-pod-ddp-0.json",
    "create-pod-ddp-1.json",
    "create-pod-ddp-2.json",
    "create-pod-demo.json",
    "create-pod-kaniko-build-abc.json",
    "create-pod-launch-acme-mnist-mzxkz.json",
    "create-pod-wandb-job-run42-master-0.json",
    "create-pod-wandb-job-run42-worker-0.json",
    "create-pod-wandb-job-run42-worker-1.json",
    "create-pytorchjob-run42-pytorch-job.json",
    "create-trainjob-llama-ft.json",
    "create-vcjob-wandb-job-run42.json",
    "dryrun-create-job-demo.json",
    "update-job-demo.json",
    "update-pod-wandb-job-run42-worker-0.json",
    "update-vcjob-wandb-job-run42.json",
);

/// The embedded default policy (src/policy/default-config.yaml).
pub static DEFAULT_POLICY: LazyLock<Policy> = LazyLock::new(Policy::embedded_default);

/// A policy that switches on what the default leaves off: several queues, namespace defaults,
/// pod-level security settings, an NFS cache, wait-for-master, torchrun's nproc, strict
/// templates, totals, deadlines, registries, namespaces, warn and audit enforcement.
pub const WIDE_CONFIG_YAML: &str = include_str!("wide-config.yaml");

pub static WIDE_POLICY: LazyLock<Policy> = LazyLock::new(|| {
    Policy::from_yaml(WIDE_CONFIG_YAML).unwrap_or_else(|e| panic!("wide-config.yaml: {e}"))
});

/// Parses a fixture's JSON.
pub fn fixture_json(index: usize) -> Value {
    serde_json::from_slice(FIXTURES[index % FIXTURES.len()].1).expect("fixtures are JSON")
}

/// What one checked review produced.
pub struct Reviewed {
    pub request: AdmissionRequest,
    pub allowed: bool,
    /// The request object with the response's patch applied (mutate endpoint, allowed, patched).
    pub patched: Option<Value>,
}

/// Runs `review` and checks what holds for every answer:
///
/// * a rejected body is one `parse_request` rejects too;
/// * the answer is byte for byte `decide`'s on the request `parse_request` reads (which parses
///   the managed field sets whole, where `review` keeps them as text);
/// * the response is JSON, an `admission.k8s.io/v1` AdmissionReview, echoing the request uid;
/// * a denial carries a status and no patch; only the mutate endpoint patches;
/// * a patch is base64 of a non-empty RFC 6902 patch that applies to the request object;
/// * warnings respect the API server's length bound.
pub fn review_checked(policy: &Policy, endpoint: Endpoint, body: &[u8]) -> Option<Reviewed> {
    let outcome = match review(policy, endpoint, body, &NoCluster) {
        Ok(outcome) => outcome,
        Err(_) => {
            assert!(
                parse_request(body).is_err(),
                "review rejected a parseable body"
            );
            return None;
        }
    };
    let json: Value = serde_json::from_slice(&outcome.body).expect("the response is JSON");
    let answer: AdmissionReviewResponse =
        serde_json::from_value(json).expect("the response is an AdmissionReview");
    assert_eq!(answer.api_version, ADMISSION_API_VERSION);
    assert_eq!(answer.kind, ADMISSION_KIND);
    let request = parse_request(body).expect("review accepted the body");
    // The review reads the managed field sets as text; on the request parsed whole the answer
    // is the same, byte for byte.
    let whole = launchgate::review::decide(policy, endpoint, &request, &NoCluster);
    assert!(
        review_response_body(&whole.response) == outcome.body,
        "the answer differs when the managed field sets are parsed whole"
    );
    let response = answer.response;
    assert_eq!(response.uid, request.uid, "the response echoes the uid");
    for w in &response.warnings {
        assert!(
            w.chars().count() <= MAX_WARNING_CHARS,
            "warning too long: {w:?}"
        );
    }
    if !response.allowed {
        assert!(response.patch.is_none(), "a denial carries no patch");
        assert!(response.status.is_some(), "a denial carries a status");
    }
    let patched = match response.decoded_patch() {
        None => {
            assert!(response.patch_type.is_none(), "patchType without a patch");
            assert_eq!(outcome.summary.patch_operations, 0);
            None
        }
        Some(decoded) => {
            let patch = decoded.expect("the patch is base64 of a JSON Patch");
            assert_eq!(
                endpoint,
                Endpoint::Mutate,
                "only the mutate endpoint patches"
            );
            assert_eq!(response.patch_type.as_deref(), Some("JSONPatch"));
            assert!(!patch.0.is_empty(), "an empty patch is not attached");
            assert_eq!(outcome.summary.patch_operations, patch.0.len());
            let mut object = request
                .object
                .clone()
                .expect("a patched request has an object");
            if let Err(e) = json_patch::patch(&mut object, &patch) {
                panic!("the patch does not apply to the request object: {e}");
            }
            Some(object)
        }
    };
    Some(Reviewed {
        request,
        allowed: response.allowed,
        patched,
    })
}

/// What [`review_both`] got to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checked {
    /// Not an AdmissionReview: both endpoints answered with an error.
    Rejected,
    /// The mutate endpoint denied.
    Denied,
    /// The mutate endpoint allowed without a patch.
    Unpatched,
    /// The mutate endpoint patched, and the patched object was not patched again.
    PatchedOnce,
}

/// Reviews `body` on both endpoints with the checks of [`review_checked`]. When the mutate
/// endpoint allowed and patched, the patched object is reviewed again on the mutate endpoint:
/// every mutator is idempotent and the queue label it records resolves to the same queue, so
/// the second answer must carry no patch.
pub fn review_both(policy: &Policy, body: &[u8]) -> Checked {
    let _ = review_checked(policy, Endpoint::Validate, body);
    let Some(first) = review_checked(policy, Endpoint::Mutate, body) else {
        return Checked::Rejected;
    };
    if !first.allowed {
        return Checked::Denied;
    }
    let Some(patched) = first.patched else {
        return Checked::Unpatched;
    };
    let again = AdmissionRequest {
        object: Some(patched),
        ..first.request
    };
    let again_body = serde_json::to_vec(&again.to_review_json()).expect("serialises");
    let second = review_checked(policy, Endpoint::Mutate, &again_body)
        .expect("the patched request is still an AdmissionReview");
    assert!(
        second.patched.is_none(),
        "mutating the patched object patched it again"
    );
    Checked::PatchedOnce
}

// ---------------------------------------------------------------------------------------------
// Structure-aware edits of a JSON tree.

/// Keys and string values the review code looks for (labels, env names, kinds, fields,
/// quantities).
pub const WORDS: &[&str] = &[
    "",
    "0",
    "1",
    "-1",
    "4",
    "4001m",
    "12Gi",
    "13000Mi",
    "0.5",
    "1e1000",
    "99999999999999999999Ei",
    "9223372036854775807",
    "{{gpus}}",
    "${image_uri}",
    "true",
    "false",
    "auto",
    "ALL",
    "Always",
    "Never",
    "OnFailure",
    "Indexed",
    "NonIndexed",
    "Master",
    "Worker",
    "master",
    "worker",
    "Pod",
    "Job",
    "PyTorchJob",
    "RuntimeDefault",
    "Unconfined",
    "TCP",
    "v1",
    "batch/v1",
    "batch.volcano.sh/v1alpha1",
    "kubeflow.org/v1",
    "jobset.x-k8s.io/v1alpha2",
    "trainer.kubeflow.org/v1alpha1",
    "JobSet",
    "TrainJob",
    "replicatedJobs",
    "runtimePatches",
    "launchgate.io/admission",
    "resourcesPerNode",
    "numNodes",
    "jobset.sigs.k8s.io/jobset-name",
    "jobset.sigs.k8s.io/job-index",
    "kueue.x-k8s.io/job-min-parallelism",
    "gpu-queue",
    "queue-b",
    "nope",
    "launch",
    "wandb",
    "istio-proxy",
    "linkerd-proxy",
    "wait-for-master",
    "pytorchjob-port",
    "launchgate-cache",
    "docker.io/acme/train",
    "ghcr.io/acme/train",
    "evil.io/x",
    "/root/.cache",
    "wandb.ai/monitor",
    "wandb.ai/agent",
    "launchgate.io/queue",
    "queue",
    "launchgate.io/mutations",
    "launchgate.io/pytorch",
    "launchgate.io/pytorch-rank-offset",
    "launchgate.io/keep-backoff-limit",
    "volcano.sh/job-name",
    "volcano.sh/task-index",
    "volcano.sh/task-spec",
    "WANDB_LAUNCH_QUEUE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "NODE_RANK",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_NPROC_PER_NODE",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "TORCH_HOME",
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "generateName",
    "labels",
    "annotations",
    "ownerReferences",
    "controller",
    "spec",
    "template",
    "containers",
    "initContainers",
    "ephemeralContainers",
    "env",
    "value",
    "valueFrom",
    "ports",
    "containerPort",
    "image",
    "resources",
    "limits",
    "requests",
    "cpu",
    "memory",
    "nvidia.com/gpu",
    "securityContext",
    "allowPrivilegeEscalation",
    "capabilities",
    "drop",
    "add",
    "privileged",
    "seccompProfile",
    "type",
    "runAsNonRoot",
    "runAsUser",
    "fsGroup",
    "volumes",
    "volumeMounts",
    "mountPath",
    "persistentVolumeClaim",
    "claimName",
    "restartPolicy",
    "backoffLimit",
    "backoffLimitPerIndex",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "completionMode",
    "completions",
    "parallelism",
    "subdomain",
    "hostname",
    "tasks",
    "replicas",
    "maxRetry",
    "minAvailable",
    "plugins",
    "pytorch",
    "svc",
    "--port=23456",
    "--master=master",
    "--worker=worker",
    "pytorchReplicaSpecs",
    "runPolicy",
    "elasticPolicy",
    "nprocPerNode",
];

fn word(u: &mut Unstructured, words: &[&str]) -> Result<String> {
    if u.ratio(1, 6)? {
        let s: &str = u.arbitrary()?;
        return Ok(s.chars().take(64).collect());
    }
    Ok((*u.choose(words)?).to_string())
}

fn number(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=9)? {
        0 => Value::from(0),
        1 => Value::from(-1),
        2 => Value::from(i64::MAX),
        3 => Value::from(i64::MIN),
        4 => Value::from(u64::MAX),
        5 => Value::from(1.5),
        6 => Number::from_f64(1e300).map_or(Value::Null, Value::Number),
        7 => Value::from(u.int_in_range(0i64..=10)?),
        8 => Value::from(u.arbitrary::<i64>()?),
        _ => Number::from_f64(u.arbitrary::<f64>()?).map_or(Value::Null, Value::Number),
    })
}

/// A small generated value, at most `depth` levels deep.
pub fn value(u: &mut Unstructured, depth: u32, words: &[&str]) -> Result<Value> {
    let max = if depth == 0 { 4 } else { 7 };
    Ok(match u.int_in_range(0..=max)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => number(u)?,
        3 | 4 => Value::String(word(u, words)?),
        5 => {
            let n = u.int_in_range(0..=3)?;
            let mut map = Map::new();
            for _ in 0..n {
                map.insert(word(u, words)?, value(u, depth - 1, words)?);
            }
            Value::Object(map)
        }
        6 => {
            let n = u.int_in_range(0..=3)?;
            let mut list = Vec::with_capacity(n);
            for _ in 0..n {
                list.push(value(u, depth - 1, words)?);
            }
            Value::Array(list)
        }
        _ => {
            // An env entry or a name/value pair: the shape most lists hold.
            let mut map = Map::new();
            map.insert("name".into(), Value::String(word(u, words)?));
            map.insert("value".into(), value(u, depth - 1, words)?);
            Value::Object(map)
        }
    })
}

/// One step of a path into a JSON tree.
#[derive(Debug, Clone)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// The node at `path`, if it exists.
pub fn at_mut<'v>(root: &'v mut Value, path: &[Step]) -> Option<&'v mut Value> {
    let mut node = root;
    for step in path {
        node = match (node, step) {
            (Value::Object(map), Step::Key(k)) => map.get_mut(k)?,
            (Value::Array(list), Step::Index(i)) => list.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(node)
}

fn at<'v>(root: &'v Value, path: &[Step]) -> Option<&'v Value> {
    let mut node = root;
    for step in path {
        node = match (node, step) {
            (Value::Object(map), Step::Key(k)) => map.get(k)?,
            (Value::Array(list), Step::Index(i)) => list.get(*i)?,
            _ => return None,
        };
    }
    Some(node)
}

/// Walks from `start` down to a node chosen by the input (stopping early now and then).
pub fn pick_path(u: &mut Unstructured, root: &Value, start: &[Step]) -> Result<Vec<Step>> {
    let mut path = start.to_vec();
    let Some(mut node) = at(root, &path) else {
        return Ok(Vec::new());
    };
    loop {
        let children = match node {
            Value::Object(map) => map.len(),
            Value::Array(list) => list.len(),
            _ => 0,
        };
        if children == 0 || u.is_empty() || u.ratio(1, 5)? {
            return Ok(path);
        }
        let i = u.choose_index(children)?;
        node = match node {
            Value::Object(map) => {
                let (k, v) = map.iter().nth(i).expect("index < len");
                path.push(Step::Key(k.clone()));
                v
            }
            Value::Array(list) => {
                path.push(Step::Index(i));
                &list[i]
            }
            _ => unreachable!("has children"),
        };
    }
}

/// Number of nodes in a tree (bounds how large duplication may grow it).
pub fn size(value: &Value) -> usize {
    1 + match value {
        Value::Object(map) => map.values().map(size).sum(),
        Value::Array(list) => list.iter().map(size).sum(),
        _ => 0,
    }
}

/// Largest tree an edit may build (nodes).
const MAX_NODES: usize = 20_000;

/// Applies one edit chosen by the input somewhere below one of `starts`: replace a value,
/// delete it, duplicate it (next to itself, or a list element appended), insert a key or
/// element, or copy another subtree over it.
pub fn edit(
    u: &mut Unstructured,
    root: &mut Value,
    starts: &[&[Step]],
    words: &[&str],
) -> Result<()> {
    let start = *u.choose(starts)?;
    let path = pick_path(u, root, start)?;
    match u.int_in_range(0..=5)? {
        // Replace with a generated value.
        0 | 1 => {
            let v = value(u, 2, words)?;
            if let Some(node) = at_mut(root, &path) {
                *node = v;
            }
        }
        // Delete from the parent.
        2 => {
            let Some((last, parent)) = path.split_last() else {
                return Ok(());
            };
            match (at_mut(root, parent), last) {
                (Some(Value::Object(map)), Step::Key(k)) => {
                    map.remove(k);
                }
                (Some(Value::Array(list)), Step::Index(i)) if *i < list.len() => {
                    list.remove(*i);
                }
                _ => {}
            }
        }
        // Duplicate: a list element next to itself, or (for a list) one of its elements.
        3 => {
            if size(root) > MAX_NODES {
                return Ok(());
            }
            if let Some(Value::Array(list)) = at_mut(root, &path)
                && !list.is_empty()
            {
                let i = u.choose_index(list.len())?;
                let copy = list[i].clone();
                list.push(copy);
                return Ok(());
            }
            if let Some((Step::Index(i), parent)) = path.split_last()
                && let Some(Value::Array(list)) = at_mut(root, parent)
                && *i < list.len()
            {
                let copy = list[*i].clone();
                list.insert(*i, copy);
            }
        }
        // Insert a key (object) or element (list).
        4 => {
            let key = word(u, words)?;
            let v = value(u, 2, words)?;
            match at_mut(root, &path) {
                Some(Value::Object(map)) => {
                    map.insert(key, v);
                }
                Some(Value::Array(list)) => {
                    let i = u.int_in_range(0..=list.len())?;
                    list.insert(i, v);
                }
                _ => {}
            }
        }
        // Copy another subtree over this one.
        _ => {
            let from = pick_path(u, root, start)?;
            let Some(source) = at(root, &from).cloned() else {
                return Ok(());
            };
            if size(root) + size(&source) > MAX_NODES {
                return Ok(());
            }
            if let Some(node) = at_mut(root, &path) {
                *node = source;
            }
        }
    }
    Ok(())
}

/// Shorthand for a path of keys.
pub fn keys(keys: &[&str]) -> Vec<Step> {
    keys.iter().map(|k| Step::Key((*k).to_string())).collect()
}

// ---------------------------------------------------------------------------------------------
// Edited AdmissionReviews (review_structured).

/// Group/version/kind combinations: the workload kinds and near misses.
const GVKS: &[(&str, &str, &str)] = &[
    ("", "v1", "Pod"),
    ("batch", "v1", "Job"),
    ("batch.volcano.sh", "v1alpha1", "Job"),
    ("kubeflow.org", "v1", "PyTorchJob"),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet"),
    ("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
    ("apps", "v1", "Deployment"),
    ("batch", "v2", "Job"),
];

const OPERATIONS: &[&str] = &["CREATE", "UPDATE", "DELETE", "CONNECT"];

/// Request-level edits: kind, operation, sub-resource, namespace, name, dryRun, oldObject.
fn edit_request(u: &mut Unstructured, review: &mut Value) -> Result<()> {
    let Some(request) = review.get_mut("request").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    match u.int_in_range(0..=6)? {
        0 => {
            let (group, version, kind) = *u.choose(GVKS)?;
            request.insert(
                "kind".into(),
                json!({"group": group, "version": version, "kind": kind}),
            );
            if u.arbitrary()?
                && let Some(object) = request.get_mut("object").and_then(Value::as_object_mut)
            {
                let api_version = if group.is_empty() {
                    version.to_string()
                } else {
                    format!("{group}/{version}")
                };
                object.insert("apiVersion".into(), json!(api_version));
                object.insert("kind".into(), json!(kind));
            }
        }
        1 => {
            request.insert("operation".into(), json!(*u.choose(OPERATIONS)?));
        }
        2 => {
            let sub = *u.choose(&["", "status", "scale", "ephemeralcontainers"])?;
            request.insert("subResource".into(), json!(sub));
        }
        3 => {
            let ns = *u.choose(&["wandb", "teamb", "default", ""])?;
            request.insert("namespace".into(), json!(ns));
        }
        4 => {
            let name = *u.choose(&["", "demo", "run42-master-0", "a.b"])?;
            request.insert("name".into(), json!(name));
        }
        5 => {
            request.insert("dryRun".into(), json!(u.arbitrary::<bool>()?));
        }
        _ => {
            // Turn a CREATE into an UPDATE of itself (or drop oldObject).
            match request.get("object").cloned() {
                Some(object) if u.arbitrary()? => {
                    request.insert("oldObject".into(), object);
                    request.insert("operation".into(), json!("UPDATE"));
                }
                _ => {
                    request.remove("oldObject");
                }
            }
        }
    }
    Ok(())
}

/// The policy an edited review is judged by: [`WIDE_POLICY`] or [`DEFAULT_POLICY`].
fn policy(wide: bool) -> &'static Policy {
    if wide { &WIDE_POLICY } else { &DEFAULT_POLICY }
}

/// A fixture with 1–8 edits chosen by the input, serialised, and the policy to review it with
/// (the default or the wide one).
pub fn edited_review(u: &mut Unstructured) -> Result<(&'static Policy, Vec<u8>)> {
    let wide = u.arbitrary::<bool>()?;
    let mut review = fixture_json(u.choose_index(FIXTURES.len())?);
    let object = keys(&["request", "object"]);
    let spec = keys(&["request", "object", "spec"]);
    let template_spec = keys(&["request", "object", "spec", "template", "spec"]);
    let labels = keys(&["request", "object", "metadata", "labels"]);
    let old = keys(&["request", "oldObject"]);
    let starts: [&[Step]; 7] = [&[], &object, &spec, &spec, &template_spec, &labels, &old];
    let edits = u.int_in_range(1..=8)?;
    for _ in 0..edits {
        if u.ratio(1, 4)? {
            edit_request(u, &mut review)?;
        } else {
            edit(u, &mut review, &starts, WORDS)?;
        }
    }
    let body = serde_json::to_vec(&review).expect("serialises");
    Ok((policy(wide), body))
}

// ---------------------------------------------------------------------------------------------
// Managed fields (field_sets).

/// Keys and values of managed-fields entries: operations, subresources and the field sets of
/// the fields whose apply record the mutators read.
pub const FIELD_SET_WORDS: &[&str] = &[
    "Apply",
    "Update",
    "",
    "status",
    "scale",
    "operation",
    "subresource",
    "fieldsV1",
    "fieldsType",
    "FieldsV1",
    "manager",
    "managedFields",
    ".",
    "f:spec",
    "f:metadata",
    "f:template",
    "f:backoffLimit",
    "f:ttlSecondsAfterFinished",
    "f:activeDeadlineSeconds",
    "f:dnsPolicy",
    "f:nprocPerNode",
    "f:maxRetry",
    "f:runPolicy",
    "f:podReplacementPolicy",
    "{\"f:spec\":{\"f:backoffLimit\":{}}}",
    "{",
];

/// A fixture whose managed fields (and the object's spec, now and then) get 1–8 edits chosen
/// by the input, the first entry an apply record more often than not; serialised, with the
/// policy to review it with.
pub fn edited_managed_fields(u: &mut Unstructured) -> Result<(&'static Policy, Vec<u8>)> {
    let wide = u.arbitrary::<bool>()?;
    let mut review = fixture_json(u.choose_index(FIXTURES.len())?);
    if u.ratio(2, 3)?
        && let Some(entry) = review.pointer_mut("/request/object/metadata/managedFields/0")
    {
        entry["operation"] = json!("Apply");
    }
    let managed = keys(&["request", "object", "metadata", "managedFields"]);
    let metadata = keys(&["request", "object", "metadata"]);
    let old = keys(&["request", "oldObject", "metadata", "managedFields"]);
    let spec = keys(&["request", "object", "spec"]);
    let starts: [&[Step]; 5] = [&managed, &managed, &metadata, &old, &spec];
    let words: Vec<&str> = FIELD_SET_WORDS.iter().chain(WORDS).copied().collect();
    for _ in 0..u.int_in_range(1..=8)? {
        edit(u, &mut review, &starts, &words)?;
    }
    let body = serde_json::to_vec(&review).expect("serialises");
    Ok((policy(wide), body))
}
