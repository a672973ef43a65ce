//! Read-only views of cluster state handed to the pure core.
//!
//! The core never fetches anything: the server passes a snapshot backed by a cached watch
//! (see `server::owner_cache`), the CLI and tests pass [`NoCluster`] or a fixed map.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// Lookups the core may need: a pod's owner that was never mutated, the Service a distributed
/// job's pods rendezvous through.
pub trait ClusterView: Send + Sync {
    /// The Volcano Job `namespace/name` (`batch.volcano.sh/v1alpha1`), if known.
    fn volcano_job(&self, namespace: &str, name: &str) -> Option<Arc<Value>>;
    /// The Service `namespace/name`, if known (`None` also when this view holds no Services).
    fn service(&self, _namespace: &str, _name: &str) -> Option<Arc<Value>> {
        None
    }
    /// The PyTorchJob `namespace/name` (`kubeflow.org/v1`), if known (`None` also when this
    /// view holds no PyTorchJobs): what a label-less `pytorchjobs/scale` request scales.
    fn pytorch_job(&self, _namespace: &str, _name: &str) -> Option<Arc<Value>> {
        None
    }
    /// The TrainJob `namespace/name` (`trainer.kubeflow.org/v1alpha1`), if known (`None` also
    /// when this view holds no TrainJobs): the run whose bound the JobSet Trainer makes for it
    /// is held to.
    fn train_job(&self, _namespace: &str, _name: &str) -> Option<Arc<Value>> {
        None
    }
    /// The TrainJob runtime `kind` (`ClusterTrainingRuntime`, cluster-scoped: `namespace` is
    /// ignored; or `TrainingRuntime`) named `name`.
    fn training_runtime(&self, _kind: &str, _namespace: &str, _name: &str) -> RuntimeLookup {
        RuntimeLookup::Unavailable
    }
    /// True when this view is backed by a live cluster (false offline).
    fn is_connected(&self) -> bool;
}

/// The cluster-scoped runtime kind a TrainJob names by default.
pub const CLUSTER_RUNTIME: &str = "ClusterTrainingRuntime";
/// The namespaced runtime kind.
pub const NAMESPACED_RUNTIME: &str = "TrainingRuntime";

/// What looking up a TrainJob's runtime found.
#[derive(Debug, Clone)]
pub enum RuntimeLookup {
    /// The runtime as stored.
    Found(Arc<Value>),
    /// The runtimes are known (the watch has listed them) and this one is not among them.
    NotFound,
    /// Runtimes cannot be read: offline, no cluster lookups, the Trainer CRDs not installed,
    /// no RBAC, or the watch has not listed them yet.
    Unavailable,
}

/// No cluster: the offline CLI.
pub struct NoCluster;

impl ClusterView for NoCluster {
    fn volcano_job(&self, _namespace: &str, _name: &str) -> Option<Arc<Value>> {
        None
    }
    fn is_connected(&self) -> bool {
        false
    }
}

/// A fixed set of objects (tests, or a snapshot taken from a cache).
#[derive(Default)]
pub struct StaticCluster {
    volcano_jobs: HashMap<(String, String), Arc<Value>>,
    services: HashMap<(String, String), Arc<Value>>,
    pytorch_jobs: HashMap<(String, String), Arc<Value>>,
    train_jobs: HashMap<(String, String), Arc<Value>>,
    /// By `(kind, namespace, name)`; namespace empty for a ClusterTrainingRuntime.
    runtimes: HashMap<(String, String, String), Arc<Value>>,
}

/// `(namespace, name)` of an object (namespace `default` when unset).
fn key_of(object: &Value) -> (String, String) {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str);
    (
        text("/metadata/namespace").unwrap_or("default").to_string(),
        text("/metadata/name").unwrap_or_default().to_string(),
    )
}

impl StaticCluster {
    /// Adds a Volcano Job to the view.
    pub fn with_volcano_job(mut self, job: Value) -> Self {
        self.volcano_jobs.insert(key_of(&job), Arc::new(job));
        self
    }

    /// Adds a PyTorchJob to the view.
    pub fn with_pytorch_job(mut self, job: Value) -> Self {
        self.pytorch_jobs.insert(key_of(&job), Arc::new(job));
        self
    }

    /// Adds a TrainJob to the view.
    pub fn with_train_job(mut self, job: Value) -> Self {
        self.train_jobs.insert(key_of(&job), Arc::new(job));
        self
    }

    /// Adds a ClusterTrainingRuntime or TrainingRuntime (by its `kind`) to the view.
    pub fn with_training_runtime(mut self, runtime: Value) -> Self {
        let kind = runtime
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let (namespace, name) = key_of(&runtime);
        let namespace = if kind == CLUSTER_RUNTIME {
            String::new()
        } else {
            namespace
        };
        self.runtimes
            .insert((kind, namespace, name), Arc::new(runtime));
        self
    }

    /// Adds a Service to the view.
    pub fn with_service(mut self, service: Value) -> Self {
        self.services.insert(key_of(&service), Arc::new(service));
        self
    }
}

impl ClusterView for StaticCluster {
    fn volcano_job(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.volcano_jobs
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.services
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
    fn pytorch_job(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.pytorch_jobs
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
    fn train_job(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.train_jobs
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
    fn training_runtime(&self, kind: &str, namespace: &str, name: &str) -> RuntimeLookup {
        let namespace = if kind == CLUSTER_RUNTIME {
            ""
        } else {
            namespace
        };
        let key = (kind.to_string(), namespace.to_string(), name.to_string());
        match self.runtimes.get(&key) {
            Some(runtime) => RuntimeLookup::Found(runtime.clone()),
            None => RuntimeLookup::NotFound,
        }
    }
    fn is_connected(&self) -> bool {
        true
    }
}
