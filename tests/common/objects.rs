//! Where the pod templates of each launch workload kind live, written out for the tests: an
//! oracle that does not borrow the crate's own template walk.

use serde_json::Value;

/// The workload kinds launchgate mutates and validates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pod,
    BatchJob,
    VolcanoJob,
    PyTorchJob,
}

/// The kind of an object, from its `apiVersion` and `kind`.
pub fn kind_of(object: &Value) -> Option<Kind> {
    match (object["apiVersion"].as_str()?, object["kind"].as_str()?) {
        ("v1", "Pod") => Some(Kind::Pod),
        ("batch/v1", "Job") => Some(Kind::BatchJob),
        ("batch.volcano.sh/v1alpha1", "Job") => Some(Kind::VolcanoJob),
        ("kubeflow.org/v1", "PyTorchJob") => Some(Kind::PyTorchJob),
        _ => None,
    }
}

/// JSON Pointers of every pod template of `object` (`""` for a Pod, which is its own).
pub fn template_pointers(object: &Value) -> Vec<String> {
    match kind_of(object) {
        Some(Kind::Pod) => vec![String::new()],
        Some(Kind::BatchJob) => vec!["/spec/template".into()],
        Some(Kind::VolcanoJob) => {
            let n = object["spec"]["tasks"].as_array().map_or(0, Vec::len);
            (0..n)
                .map(|i| format!("/spec/tasks/{i}/template"))
                .collect()
        }
        Some(Kind::PyTorchJob) => object["spec"]["pytorchReplicaSpecs"]
            .as_object()
            .into_iter()
            .flat_map(|specs| specs.keys())
            .map(|t| format!("/spec/pytorchReplicaSpecs/{t}/template"))
            .collect(),
        None => Vec::new(),
    }
}

/// Every pod template of `object` with its JSON Pointer.
pub fn templates(object: &Value) -> Vec<(String, &Value)> {
    template_pointers(object)
        .into_iter()
        .filter_map(|p| Some((p.clone(), object.pointer(&p)?)))
        .collect()
}
