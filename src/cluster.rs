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
    /// True when this view is backed by a live cluster (false offline).
    fn is_connected(&self) -> bool;
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
    fn is_connected(&self) -> bool {
        true
    }
}
