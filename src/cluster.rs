//! Read-only views of cluster state handed to the pure core.
//!
//! The core never fetches anything: the server passes a snapshot backed by a cached watch
//! (see `server::owner_cache`), the CLI and tests pass [`NoCluster`] or a fixed map.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// Lookups the core may need for a pod whose owner was never mutated.
pub trait ClusterView: Send + Sync {
    /// The Volcano Job `namespace/name` (`batch.volcano.sh/v1alpha1`), if known.
    fn volcano_job(&self, namespace: &str, name: &str) -> Option<Arc<Value>>;
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
}

impl StaticCluster {
    /// Adds a Volcano Job to the view.
    pub fn with_volcano_job(mut self, job: Value) -> Self {
        let ns = job
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let name = job
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        self.volcano_jobs.insert((ns, name), Arc::new(job));
        self
    }
}

impl ClusterView for StaticCluster {
    fn volcano_job(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.volcano_jobs
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
    fn is_connected(&self) -> bool {
        true
    }
}
