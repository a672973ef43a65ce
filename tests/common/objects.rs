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
    JobSet,
    /// Its pods' template is the runtime's; launchgate's runtime patch holds what it adds.
    TrainJob,
}

/// The kind of an object, from its `apiVersion` and `kind`.
pub fn kind_of(object: &Value) -> Option<Kind> {
    match (object["apiVersion"].as_str()?, object["kind"].as_str()?) {
        ("v1", "Pod") => Some(Kind::Pod),
        ("batch/v1", "Job") => Some(Kind::BatchJob),
        ("batch.volcano.sh/v1alpha1", "Job") => Some(Kind::VolcanoJob),
        ("kubeflow.org/v1", "PyTorchJob") => Some(Kind::PyTorchJob),
        ("jobset.x-k8s.io/v1alpha2", "JobSet") => Some(Kind::JobSet),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob") => Some(Kind::TrainJob),
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
        Some(Kind::JobSet) => {
            let n = object["spec"]["replicatedJobs"].as_array().map_or(0, Vec::len);
            (0..n)
                .map(|i| format!("/spec/replicatedJobs/{i}/template/spec/template"))
                .collect()
        }
        // launchgate's runtime patch, on the runtime's `node` replicated job (once written).
        Some(Kind::TrainJob) => object["spec"]["runtimePatches"]
            .as_array()
            .into_iter()
            .flatten()
            .position(|p| p["manager"] == "launchgate.io/admission")
            .map(|i| {
                format!(
                    "/spec/runtimePatches/{i}/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template"
                )
            })
            .into_iter()
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
