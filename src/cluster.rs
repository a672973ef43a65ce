//! Read-only views of cluster state handed to the pure core.
//!
//! The core never fetches anything: the server passes a snapshot backed by a cached watch
//! (see `server::owner_cache`), the offline tools pass [`NoCluster`] or the TrainJob runtimes
//! they were given ([`GivenObjects`]), tests a fixed map.

use crate::kinds::WorkloadKind;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// Lookups the core may need: a pod's owner that was never mutated, the Service a distributed
/// job's pods rendezvous through.
pub trait ClusterView: Send + Sync {
    /// The workload of `kind` named `namespace/name`, if known (`None` also when this view
    /// holds none of that kind: the server watches the kinds whose descriptor says so,
    /// [`crate::kinds::KindSpec::watch`]).
    fn workload(&self, _kind: WorkloadKind, _namespace: &str, _name: &str) -> Option<Arc<Value>> {
        None
    }
    /// True when this view holds every workload of `kind` in `namespace` the API server had
    /// when it last listed them (a cache that watches every one there and has listed them), so
    /// one [`ClusterView::workload`] does not hold was created a moment ago. False when a miss
    /// says nothing: offline, no cluster lookups, a namespace or kind not watched (or watched
    /// by a label selector), or not listed yet.
    fn lists_workloads(&self, _kind: WorkloadKind, _namespace: &str) -> bool {
        false
    }
    /// The Service `namespace/name`, if known (`None` also when this view holds no Services).
    fn service(&self, _namespace: &str, _name: &str) -> Option<Arc<Value>> {
        None
    }
    /// The TrainJob runtime `kind` (`ClusterTrainingRuntime`, cluster-scoped: `namespace` is
    /// ignored; or `TrainingRuntime`) named `name`.
    fn training_runtime(&self, _kind: &str, _namespace: &str, _name: &str) -> RuntimeLookup {
        RuntimeLookup::Unavailable
    }
    /// The Dynamic Resource Allocation object `kind` named `namespace/name` (a
    /// ResourceClaimTemplate or ResourceClaim a pod names in `spec.resourceClaims`).
    fn dra_object(&self, _kind: DraKind, _namespace: &str, _name: &str) -> RuntimeLookup {
        RuntimeLookup::Unavailable
    }
    /// True when this view is backed by a live cluster (false offline).
    fn is_connected(&self) -> bool;
}

/// The API group of Dynamic Resource Allocation.
pub const DRA_GROUP: &str = "resource.k8s.io";
/// The versions of the DRA objects launchgate reads (`v1` is GA since Kubernetes 1.34; the
/// betas have the same claim shape, or `exactly`'s fields on the request itself).
pub const DRA_VERSIONS: [&str; 3] = ["v1", "v1beta2", "v1beta1"];

/// The DRA objects a pod's claims name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DraKind {
    /// `spec.resourceClaims[].resourceClaimTemplateName`: one claim per pod, made from it.
    ResourceClaimTemplate,
    /// `spec.resourceClaims[].resourceClaimName`: a claim shared by every pod that names it.
    ResourceClaim,
}

impl DraKind {
    /// Both kinds.
    pub const ALL: [DraKind; 2] = [DraKind::ResourceClaimTemplate, DraKind::ResourceClaim];

    /// The kind as the API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            DraKind::ResourceClaimTemplate => "ResourceClaimTemplate",
            DraKind::ResourceClaim => "ResourceClaim",
        }
    }

    /// The resource (plural).
    pub fn plural(self) -> &'static str {
        match self {
            DraKind::ResourceClaimTemplate => "resourceclaimtemplates",
            DraKind::ResourceClaim => "resourceclaims",
        }
    }

    /// The DRA kind of a manifest (`resource.k8s.io/<version>` ResourceClaimTemplate or
    /// ResourceClaim); `Ok(None)` for any other object. A DRA kind in a version launchgate does
    /// not read is an error.
    pub fn of(object: &Value) -> Result<Option<DraKind>, String> {
        let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
        let Some(kind) = DraKind::ALL
            .into_iter()
            .find(|k| k.as_str() == text("kind"))
        else {
            return Ok(None);
        };
        match text("apiVersion").split_once('/') {
            Some((DRA_GROUP, version)) if DRA_VERSIONS.contains(&version) => Ok(Some(kind)),
            Some((DRA_GROUP, version)) => Err(format!(
                "{} of {DRA_GROUP}/{version}: launchgate reads {DRA_GROUP}/{}",
                kind.as_str(),
                DRA_VERSIONS.join(", ")
            )),
            _ => Ok(None),
        }
    }
}

/// The cluster-scoped runtime kind a TrainJob names by default (its descriptor's).
pub const CLUSTER_RUNTIME: &str = crate::kinds::trainjob::RUNTIME.cluster;
/// The namespaced runtime kind.
pub const NAMESPACED_RUNTIME: &str = crate::kinds::trainjob::RUNTIME.namespaced;
/// The API group of Kubeflow Trainer's TrainJobs and runtimes.
pub const TRAINER_GROUP: &str = crate::kinds::trainjob::GROUP;
/// The version of the runtimes launchgate reads.
pub const RUNTIME_VERSION: &str = crate::kinds::trainjob::VERSION;
/// The namespace of an object that names none (as the API server and `kubectl` place it).
pub use crate::admission::DEFAULT_NAMESPACE;

/// The resource (plural) of a runtime kind: `clustertrainingruntimes` or `trainingruntimes`.
pub fn runtime_plural(kind: &str) -> &'static str {
    if kind == CLUSTER_RUNTIME {
        "clustertrainingruntimes"
    } else {
        "trainingruntimes"
    }
}

/// The runtime kind of a manifest that is a Trainer runtime (`trainer.kubeflow.org/v1alpha1`
/// ClusterTrainingRuntime or TrainingRuntime); `Ok(None)` for any other object. A runtime kind
/// of Trainer's group in another version is an error: it is not read, and not a workload either.
pub fn runtime_kind(object: &Value) -> Result<Option<&'static str>, String> {
    let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
    let kind = match text("kind") {
        CLUSTER_RUNTIME => CLUSTER_RUNTIME,
        NAMESPACED_RUNTIME => NAMESPACED_RUNTIME,
        _ => return Ok(None),
    };
    match text("apiVersion").split_once('/') {
        Some((TRAINER_GROUP, RUNTIME_VERSION)) => Ok(Some(kind)),
        Some((TRAINER_GROUP, version)) => Err(format!(
            "{kind} of {TRAINER_GROUP}/{version}: launchgate reads {TRAINER_GROUP}/{RUNTIME_VERSION} runtimes"
        )),
        _ => Ok(None),
    }
}

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
    fn is_connected(&self) -> bool {
        false
    }
}

/// Where a runtime is kept by `(kind, namespace, name)`: no namespace for a
/// ClusterTrainingRuntime, which is cluster-scoped.
fn runtime_key(kind: &str, namespace: &str, name: &str) -> (String, String, String) {
    let namespace = if kind == CLUSTER_RUNTIME {
        ""
    } else {
        namespace
    };
    (kind.to_string(), namespace.to_string(), name.to_string())
}

/// A fixed set of objects (tests, or a snapshot taken from a cache).
#[derive(Default)]
pub struct StaticCluster {
    /// By `(kind, namespace, name)`.
    workloads: HashMap<(WorkloadKind, String, String), Arc<Value>>,
    /// By `(kind, namespace, name)`; namespace empty for a ClusterTrainingRuntime.
    runtimes: HashMap<(String, String, String), Arc<Value>>,
    /// ResourceClaimTemplates and ResourceClaims by `(kind, namespace, name)`.
    dra: HashMap<(DraKind, String, String), Arc<Value>>,
}

/// `(namespace, name)` of an object (namespace `default` when unset).
fn key_of(object: &Value) -> (String, String) {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str);
    (
        text("/metadata/namespace")
            .unwrap_or(DEFAULT_NAMESPACE)
            .to_string(),
        text("/metadata/name").unwrap_or_default().to_string(),
    )
}

impl StaticCluster {
    /// Adds a workload to the view, of the kind its `apiVersion` and `kind` name.
    ///
    /// # Panics
    /// On an object of no kind launchgate knows (a mistake of the test or snapshot that
    /// builds the view).
    pub fn with_workload(mut self, object: Value) -> Self {
        let kind = WorkloadKind::of_object(&object)
            .unwrap_or_else(|| panic!("not a workload launchgate knows: {object}"));
        let (namespace, name) = key_of(&object);
        self.workloads
            .insert((kind, namespace, name), Arc::new(object));
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
        self.runtimes
            .insert(runtime_key(&kind, &namespace, &name), Arc::new(runtime));
        self
    }

    /// Adds a ResourceClaimTemplate or ResourceClaim (by its `kind`) to the view.
    ///
    /// # Panics
    /// On an object that is neither (a mistake of the test that builds the view).
    pub fn with_dra_object(mut self, object: Value) -> Self {
        let kind = DraKind::of(&object)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("not a DRA claim or template: {object}"));
        let (namespace, name) = key_of(&object);
        self.dra.insert((kind, namespace, name), Arc::new(object));
        self
    }
}

impl ClusterView for StaticCluster {
    fn workload(&self, kind: WorkloadKind, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.workloads
            .get(&(kind, namespace.to_string(), name.to_string()))
            .cloned()
    }
    fn lists_workloads(&self, _kind: WorkloadKind, _namespace: &str) -> bool {
        true
    }
    fn training_runtime(&self, kind: &str, namespace: &str, name: &str) -> RuntimeLookup {
        match self.runtimes.get(&runtime_key(kind, namespace, name)) {
            Some(runtime) => RuntimeLookup::Found(runtime.clone()),
            None => RuntimeLookup::NotFound,
        }
    }
    fn dra_object(&self, kind: DraKind, namespace: &str, name: &str) -> RuntimeLookup {
        match self
            .dra
            .get(&(kind, namespace.to_string(), name.to_string()))
        {
            Some(object) => RuntimeLookup::Found(object.clone()),
            None => RuntimeLookup::NotFound,
        }
    }
    fn is_connected(&self) -> bool {
        true
    }
}

/// The cluster objects given to an offline tool: TrainJob runtimes and the DRA claims and
/// claim templates pods name, as manifests beside the workloads (`validate`, `mutate`, a test
/// suite, the playground), or the runtimes an audit listed. The workloads are sized by them as
/// the webhook with cluster lookups sizes them. Not a live cluster: every other lookup finds
/// nothing.
#[derive(Debug, Default, Clone)]
pub struct GivenObjects {
    /// By `(kind, namespace, name)`; namespace empty for a ClusterTrainingRuntime.
    runtimes: HashMap<(String, String, String), Arc<Value>>,
    /// ResourceClaimTemplates and ResourceClaims by `(kind, namespace, name)`.
    dra: HashMap<(DraKind, String, String), Arc<Value>>,
    /// The kinds whose every runtime is here (an audit listed them all): a runtime of such a
    /// kind that is not here is not in the cluster. For any other kind it is unknown.
    complete: Vec<&'static str>,
}

/// True for a manifest an offline tool takes as a cluster object rather than a workload to
/// judge: a TrainJob runtime, a ResourceClaimTemplate or a ResourceClaim. Errors: such a kind in
/// a version launchgate does not read.
pub fn is_given_object(object: &Value) -> Result<bool, String> {
    Ok(runtime_kind(object)?.is_some() || DraKind::of(object)?.is_some())
}

impl GivenObjects {
    /// Adds a ResourceClaimTemplate or ResourceClaim, placed in `namespace` (as bare objects
    /// are), `default` when `None`. Errors: not such a manifest, no name, the same object twice.
    fn add_dra(
        &mut self,
        kind: DraKind,
        object: Value,
        namespace: Option<&str>,
    ) -> Result<(), String> {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("{} without metadata.name", kind.as_str()))?
            .to_string();
        if object.get("spec").is_some_and(|s| !s.is_object()) {
            return Err(format!("{} {name:?}: spec is not a mapping", kind.as_str()));
        }
        let namespace = namespace.unwrap_or(DEFAULT_NAMESPACE).to_string();
        let key = (kind, namespace, name);
        if self.dra.contains_key(&key) {
            let (kind, namespace, name) = key;
            return Err(format!(
                "{} {name:?} in namespace {namespace:?} is given twice",
                kind.as_str()
            ));
        }
        self.dra.insert(key, Arc::new(object));
        Ok(())
    }

    /// Adds a runtime manifest, or a DRA claim or claim template. A TrainingRuntime goes in `namespace` (where the caller places
    /// it: the offline tools as every bare object, an audit where it was listed), `default`
    /// when `None`; a ClusterTrainingRuntime is cluster-scoped. Errors: not a runtime manifest,
    /// no name, a `spec` that is not a mapping, the same runtime twice.
    pub fn add(&mut self, runtime: Value, namespace: Option<&str>) -> Result<(), String> {
        if let Some(kind) = DraKind::of(&runtime)? {
            return self.add_dra(kind, runtime, namespace);
        }
        let Some(kind) = runtime_kind(&runtime)? else {
            return Err(format!(
                "not a {TRAINER_GROUP}/{RUNTIME_VERSION} {CLUSTER_RUNTIME} or {NAMESPACED_RUNTIME}, nor a {DRA_GROUP} ResourceClaimTemplate or ResourceClaim"
            ));
        };
        let name = runtime
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("{kind} without metadata.name"))?
            .to_string();
        if runtime.get("spec").is_some_and(|s| !s.is_object()) {
            return Err(format!("{kind} {name:?}: spec is not a mapping"));
        }
        let key = runtime_key(kind, namespace.unwrap_or(DEFAULT_NAMESPACE), &name);
        if self.runtimes.contains_key(&key) {
            let (kind, namespace, name) = key;
            let place = if namespace.is_empty() {
                String::new()
            } else {
                format!(" in namespace {namespace:?}")
            };
            return Err(format!("{kind} {name:?}{place} is given twice"));
        }
        self.runtimes.insert(key, Arc::new(runtime));
        Ok(())
    }

    /// Marks `kind` as complete: every runtime of it the cluster has is here, so one that is
    /// not is "not in the cluster" (an audit that listed them), not unknown.
    pub fn listed_all(&mut self, kind: &'static str) {
        self.complete.push(kind);
    }

    /// `Kind name` of each runtime, sorted (for a summary of what was given).
    pub fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .runtimes
            .keys()
            .map(|(kind, namespace, name)| {
                if namespace.is_empty() {
                    format!("{kind} {name}")
                } else {
                    format!("{kind} {namespace}/{name}")
                }
            })
            .chain(
                self.dra
                    .keys()
                    .map(|(kind, namespace, name)| format!("{} {namespace}/{name}", kind.as_str())),
            )
            .collect();
        out.sort();
        out
    }
}

impl ClusterView for GivenObjects {
    fn training_runtime(&self, kind: &str, namespace: &str, name: &str) -> RuntimeLookup {
        match self.runtimes.get(&runtime_key(kind, namespace, name)) {
            Some(runtime) => RuntimeLookup::Found(runtime.clone()),
            None if self.complete.contains(&kind) => RuntimeLookup::NotFound,
            None => RuntimeLookup::Unavailable,
        }
    }
    fn dra_object(&self, kind: DraKind, namespace: &str, name: &str) -> RuntimeLookup {
        match self
            .dra
            .get(&(kind, namespace.to_string(), name.to_string()))
        {
            Some(object) => RuntimeLookup::Found(object.clone()),
            None => RuntimeLookup::Unavailable,
        }
    }
    fn is_connected(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The runtime kinds the cluster view reads are the ones the descriptors name.
    #[test]
    fn the_runtime_kinds_are_the_descriptors() {
        let kind = WorkloadKind::all()
            .find(|k| k.spec().runtime.is_some())
            .unwrap();
        let rt = kind.spec().runtime.unwrap();
        assert_eq!(
            (rt.cluster, rt.namespaced, kind.api_group()),
            (CLUSTER_RUNTIME, NAMESPACED_RUNTIME, TRAINER_GROUP)
        );
    }

    fn runtime(kind: &str, namespace: Option<&str>, name: &str) -> Value {
        let mut r = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
            "metadata": {"name": name}, "spec": {}});
        if let Some(ns) = namespace {
            r["metadata"]["namespace"] = json!(ns);
        }
        r
    }

    #[test]
    fn runtime_manifests_are_recognised_by_group_version_and_kind() {
        let cluster = runtime(CLUSTER_RUNTIME, None, "torch");
        assert_eq!(runtime_kind(&cluster), Ok(Some(CLUSTER_RUNTIME)));
        let ns = runtime(NAMESPACED_RUNTIME, None, "torch");
        assert_eq!(runtime_kind(&ns), Ok(Some(NAMESPACED_RUNTIME)));
        let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"});
        assert_eq!(runtime_kind(&tj), Ok(None));
        let other = json!({"apiVersion": "example.com/v1", "kind": "TrainingRuntime"});
        assert_eq!(runtime_kind(&other), Ok(None));
        let newer = json!({"apiVersion": "trainer.kubeflow.org/v2", "kind": "TrainingRuntime"});
        assert!(runtime_kind(&newer).unwrap_err().contains("v1alpha1"));
    }

    #[test]
    fn given_runtimes_are_found_where_the_cli_places_them() {
        let mut given = GivenObjects::default();
        given
            .add(runtime(CLUSTER_RUNTIME, Some("ignored"), "torch"), None)
            .unwrap();
        given
            .add(runtime(NAMESPACED_RUNTIME, None, "local"), None)
            .unwrap();
        given
            .add(
                runtime(NAMESPACED_RUNTIME, Some("team"), "own"),
                Some("team"),
            )
            .unwrap();
        given
            .add(
                runtime(NAMESPACED_RUNTIME, Some("team"), "moved"),
                Some("wandb"),
            )
            .unwrap();
        let found = |kind, ns, name| {
            matches!(
                given.training_runtime(kind, ns, name),
                RuntimeLookup::Found(_)
            )
        };
        assert!(found(CLUSTER_RUNTIME, "anywhere", "torch"));
        assert!(found(NAMESPACED_RUNTIME, "default", "local"));
        assert!(found(NAMESPACED_RUNTIME, "team", "own"));
        assert!(found(NAMESPACED_RUNTIME, "wandb", "moved"));
        assert!(!found(NAMESPACED_RUNTIME, "team", "local"));
        // Given offline, a runtime that is not here is unknown, not missing from the cluster.
        assert!(matches!(
            given.training_runtime(CLUSTER_RUNTIME, "", "other"),
            RuntimeLookup::Unavailable
        ));
        given.listed_all(CLUSTER_RUNTIME);
        assert!(matches!(
            given.training_runtime(CLUSTER_RUNTIME, "", "other"),
            RuntimeLookup::NotFound
        ));
        assert!(!given.is_connected());
        assert_eq!(given.describe().len(), 4);
    }

    #[test]
    fn a_malformed_runtime_is_refused_with_why() {
        let mut given = GivenObjects::default();
        let mut nameless = runtime(CLUSTER_RUNTIME, None, "x");
        nameless["metadata"] = json!({});
        assert!(
            given
                .add(nameless, None)
                .unwrap_err()
                .contains("metadata.name")
        );
        let mut bad_spec = runtime(CLUSTER_RUNTIME, None, "x");
        bad_spec["spec"] = json!([1]);
        assert!(given.add(bad_spec, None).unwrap_err().contains("spec"));
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert!(given.add(pod, None).unwrap_err().contains("not a"));
        given
            .add(runtime(CLUSTER_RUNTIME, None, "x"), None)
            .unwrap();
        let twice = given.add(runtime(CLUSTER_RUNTIME, None, "x"), None);
        assert_eq!(
            twice.unwrap_err(),
            r#"ClusterTrainingRuntime "x" is given twice"#
        );
    }
}
