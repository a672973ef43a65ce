//! Cluster lookups for the pure core: cached watches of the workload kinds whose descriptor asks
//! for one ([`crate::kinds::KindSpec::watch`]), of Services and of TrainJob runtimes, so
//! admission never waits on an API call.
//!
//! Workloads answer [`ClusterView::workload`]:
//! - A kind watched as [`Watch::Selected`] (a Volcano Job) holds only what it may be asked
//!   about ([`WatchScope`]): objects matching a label selector (the chart uses
//!   `wandb.ai/monitor`, which the W&B agent puts on every Job it creates), and, when namespaces
//!   are given, one watch per namespace instead of one over the cluster (RBAC can then be a
//!   Role in each). Its pods read their wiring from it: a Volcano pod whose Job launchgate
//!   never mutated lacks `MASTER_ADDR`, `MASTER_PORT` and `WORLD_SIZE`, and the PyTorch
//!   mutator reads the owner Job here. A pod whose owner is outside the scope is handled as if
//!   the owner were unknown (what can be derived from the pod alone, with a warning). The
//!   server waits (up to its ready timeout) for these lists before serving.
//! - A kind watched as [`Watch::Every`] (a PyTorchJob, a TrainJob) holds every object of the
//!   same namespaces, no label selector: a Scale may come for any PyTorchJob, and one without
//!   launch labels must be told apart from one not yet seen; the JobSet Trainer makes for a
//!   TrainJob is held to the TrainJob's run bound. Not waited for (a cluster without the CRD
//!   must not delay serving): until the list arrives the object is unknown.
//!
//! RBAC: `get`, `list`, `watch` on each watched kind's resource (the chart grants them).
//!
//! Services (core/v1, the same namespaces, no label selector: a headless Service carries no
//! launch labels) answer [`ClusterView::service`] for the rendezvous preflight
//! (`guardrails.rendezvousPreflight`). RBAC: `get`, `list`, `watch` on `services`.
//!
//! TrainJob runtimes (`trainer.kubeflow.org/v1alpha1`: TrainingRuntimes in the same namespaces,
//! ClusterTrainingRuntimes cluster-wide, no label selector) answer
//! [`ClusterView::training_runtime`]: a TrainJob is sized as Trainer will run it. RBAC: `get`,
//! `list`, `watch` on `trainingruntimes` and `clustertrainingruntimes`. Without them (Trainer
//! not installed, RBAC refused, not listed yet) a runtime is unknown, never "not found".
//!
//! DRA claims (`resource.k8s.io/v1`: ResourceClaimTemplates and ResourceClaims in the same
//! namespaces, no label selector) answer [`ClusterView::dra_object`]: the GPUs a pod asks for
//! through `spec.resourceClaims` are counted from the devices its claims request. RBAC: `get`,
//! `list`, `watch` on `resourceclaimtemplates` and `resourceclaims`. Without them (RBAC
//! refused, not listed yet) a claim is unknown and cannot be counted, never "not found".
//!
//! The stores are read-only here; each lookup converts one `DynamicObject` to a
//! `serde_json::Value`.

use crate::cluster::{CLUSTER_RUNTIME, NAMESPACED_RUNTIME};
use crate::cluster::{ClusterView, RUNTIME_VERSION, RuntimeLookup, TRAINER_GROUP, runtime_plural};
use crate::cluster::{DRA_GROUP, DRA_VERSIONS, DraKind};
use crate::kinds::{Watch, WorkloadKind};
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A workload kind's resource, as the watch names it.
fn resource_of(kind: WorkloadKind) -> ApiResource {
    let (group, version, plural) = kind.api_resource();
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind.api_kind()),
        plural,
    )
}

/// Which objects of the kinds watched as [`Watch::Selected`] are watched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchScope {
    /// Namespaces to watch; empty: all namespaces.
    pub namespaces: Vec<String>,
    /// Kubernetes label selector (`wandb.ai/monitor`, `team in (a,b)`); empty: every Job.
    pub label_selector: String,
}

/// The watched Services.
fn service_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Service"), "services")
}

/// The watched TrainJob runtimes: cluster-scoped ClusterTrainingRuntimes and namespaced
/// TrainingRuntimes (`trainer.kubeflow.org/v1alpha1`).
fn runtime_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(TRAINER_GROUP, RUNTIME_VERSION, kind),
        runtime_plural(kind),
    )
}

/// The watched DRA objects (`resource.k8s.io/v1`).
fn dra_resource(kind: DraKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(DRA_GROUP, DRA_VERSIONS[0], kind.as_str()),
        kind.plural(),
    )
}

/// Something the server reads through a cached watch with `--cluster-lookups`: an API group's
/// resources, whether they are namespaced (a Role in each watched namespace can grant them) or
/// cluster-scoped, and why they are read. [`watched`] lists them; RBAC grants `get`, `list` and
/// `watch` on each.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WatchedResources {
    /// The API group (`""` for core).
    pub group: String,
    /// The resources (plural) of that group.
    pub resources: Vec<String>,
    /// Namespaced (else cluster-scoped).
    pub namespaced: bool,
    /// Why the server reads them, for the RBAC's comments.
    pub why: String,
}

/// Everything [`start`] watches, in the order it starts the watches: each workload kind whose
/// descriptor asks for a watch ([`crate::kinds::KindSpec::watch`]), Services, the runtimes a kind
/// names and the DRA claims. The chart's RBAC is generated from it (`files/watched.json`).
pub fn watched() -> Vec<WatchedResources> {
    let entry = |resources: &[&ApiResource], namespaced: bool, why: String| WatchedResources {
        group: resources[0].group.clone(),
        resources: resources.iter().map(|r| r.plural.clone()).collect(),
        namespaced,
        why,
    };
    let mut out: Vec<WatchedResources> = WorkloadKind::all()
        .filter(|kind| kind.spec().watch != Watch::No)
        .map(|kind| entry(&[&resource_of(kind)], true, watch_reason(kind)))
        .collect();
    out.push(entry(
        &[&service_resource()],
        true,
        "Services a distributed job's pods rendezvous through (guardrails.rendezvousPreflight)"
            .into(),
    ));
    let named_by = WorkloadKind::all()
        .filter(|k| k.spec().runtime.is_some())
        .map(WorkloadKind::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    let runtimes = format!(
        "The runtimes a {named_by} names: its size, image and node container are the runtime's"
    );
    out.push(entry(
        &[&runtime_resource(NAMESPACED_RUNTIME)],
        true,
        runtimes.clone(),
    ));
    out.push(entry(
        &[&runtime_resource(CLUSTER_RUNTIME)],
        false,
        format!("{runtimes} (cluster-scoped)"),
    ));
    let dra: Vec<ApiResource> = DraKind::ALL.into_iter().map(dra_resource).collect();
    out.push(entry(
        &dra.iter().collect::<Vec<_>>(),
        true,
        "The DRA claim templates and claims pods name: the GPUs they ask for are counted from them"
            .into(),
    ));
    out
}

/// Why the server watches a workload kind, from its descriptor.
fn watch_reason(kind: WorkloadKind) -> String {
    let spec = kind.spec();
    let name = kind.as_str();
    let mut why = Vec::new();
    if spec.watch == Watch::Selected {
        why.push(format!(
            "The {name}s in the watch scope (ownerWatch): the pods they make read their wiring from them"
        ));
    } else {
        why.push(format!("Every {name} of the watched namespaces"));
    }
    if spec.scale.is_some() {
        let (_, _, resource) = kind.api_resource();
        why.push(format!(
            "a {resource}/scale request is judged against the {name} it scales"
        ));
    }
    let made: Vec<&str> = spec
        .makes
        .iter()
        .filter_map(|m| WorkloadKind::named(m.kind))
        .filter(|k| k.is_job())
        .map(WorkloadKind::as_str)
        .collect();
    if !made.is_empty() {
        why.push(format!(
            "the {} its controller makes for one is held to its run bound",
            made.join(" and ")
        ));
    }
    why.join("; ")
}

/// One store per watched namespace, or one store under `None` for all namespaces.
type Stores = Vec<(Option<String>, Store<DynamicObject>)>;

/// The TrainJob runtime watches and whether each has listed its objects yet (a runtime is
/// "not found" only once its kind's list has arrived; before that, or when the Trainer CRDs
/// are not installed or RBAC refuses, it is unknown).
#[derive(Clone)]
struct RuntimeStores {
    cluster: Store<DynamicObject>,
    namespaced: Stores,
    cluster_ready: Arc<AtomicBool>,
    namespaced_ready: Arc<AtomicBool>,
}

/// The DRA claim watches of one kind, and whether they have listed their objects yet.
#[derive(Clone)]
struct DraStores {
    kind: DraKind,
    stores: Stores,
    ready: Arc<AtomicBool>,
}

/// One watched workload kind and its stores.
#[derive(Clone)]
struct Watched {
    kind: WorkloadKind,
    resource: ApiResource,
    stores: Stores,
    /// Every store has listed its objects.
    ready: Arc<AtomicBool>,
}

/// A [`ClusterView`] backed by watch caches of the watched workload kinds, Services and
/// TrainJob runtimes.
#[derive(Clone)]
pub struct OwnerCache {
    workloads: Vec<Watched>,
    services: Stores,
    runtimes: RuntimeStores,
    dra: Vec<DraStores>,
}

/// `namespace/name` in `stores`, as a JSON value.
fn lookup(
    stores: &Stores,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
) -> Option<Arc<Value>> {
    let key = ObjectRef::new_with(name, resource.clone()).within(namespace);
    let (_, store) = stores
        .iter()
        .find(|(ns, _)| ns.as_deref().is_none_or(|ns| ns == namespace))?;
    let object = store.get(&key)?;
    serde_json::to_value(object.as_ref()).ok().map(Arc::new)
}

impl OwnerCache {
    /// The watches of the kinds watched as [`Watch::Selected`].
    fn selected(&self) -> impl Iterator<Item = &(Option<String>, Store<DynamicObject>)> {
        self.workloads
            .iter()
            .filter(|w| w.kind.spec().watch == Watch::Selected)
            .flat_map(|w| &w.stores)
    }

    /// Waits until the first list of the [`Watch::Selected`] kinds' and the Services' watches
    /// has been stored (or `timeout` passes); true when ready. The [`Watch::Every`] kinds are
    /// not waited for.
    pub async fn wait_until_ready(&self, timeout: Duration) -> bool {
        let all = async {
            for (_, store) in self.selected().chain(&self.services) {
                if store.wait_until_ready().await.is_err() {
                    return false;
                }
            }
            true
        };
        matches!(tokio::time::timeout(timeout, all).await, Ok(true))
    }

    /// Number of cached objects of the [`Watch::Selected`] kinds.
    pub(crate) fn len(&self) -> usize {
        self.selected().map(|(_, s)| s.state().len()).sum()
    }
}

impl ClusterView for OwnerCache {
    fn workload(&self, kind: WorkloadKind, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let watched = self.workloads.iter().find(|w| w.kind == kind)?;
        lookup(&watched.stores, &watched.resource, namespace, name)
    }

    fn lists_workloads(&self, kind: WorkloadKind, namespace: &str) -> bool {
        // A kind watched by a label selector holds only what matches it: a miss says nothing.
        self.workloads.iter().any(|w| {
            w.kind == kind
                && w.kind.spec().watch == Watch::Every
                && w.stores
                    .iter()
                    .any(|(ns, _)| ns.as_deref().is_none_or(|ns| ns == namespace))
                && w.ready.load(Ordering::Acquire)
        })
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        lookup(&self.services, &service_resource(), namespace, name)
    }

    fn training_runtime(&self, kind: &str, namespace: &str, name: &str) -> RuntimeLookup {
        let runtimes = &self.runtimes;
        let (ready, found) = if kind == CLUSTER_RUNTIME {
            let key = ObjectRef::new_with(name, runtime_resource(kind));
            let found = runtimes
                .cluster
                .get(&key)
                .and_then(|o| serde_json::to_value(o.as_ref()).ok().map(Arc::new));
            (runtimes.cluster_ready.load(Ordering::Acquire), found)
        } else {
            let watched = runtimes
                .namespaced
                .iter()
                .any(|(ns, _)| ns.as_deref().is_none_or(|ns| ns == namespace));
            let found = lookup(
                &runtimes.namespaced,
                &runtime_resource(kind),
                namespace,
                name,
            );
            (
                watched && runtimes.namespaced_ready.load(Ordering::Acquire),
                found,
            )
        };
        match found {
            Some(runtime) => RuntimeLookup::Found(runtime),
            None if ready => RuntimeLookup::NotFound,
            None => RuntimeLookup::Unavailable,
        }
    }

    fn dra_object(&self, kind: DraKind, namespace: &str, name: &str) -> RuntimeLookup {
        let Some(watched) = self.dra.iter().find(|d| d.kind == kind) else {
            return RuntimeLookup::Unavailable;
        };
        let covered = watched
            .stores
            .iter()
            .any(|(ns, _)| ns.as_deref().is_none_or(|ns| ns == namespace));
        match lookup(&watched.stores, &dra_resource(kind), namespace, name) {
            Some(object) => RuntimeLookup::Found(object),
            None if covered && watched.ready.load(Ordering::Acquire) => RuntimeLookup::NotFound,
            None => RuntimeLookup::Unavailable,
        }
    }

    fn is_connected(&self) -> bool {
        true
    }
}

/// Sets `flag` once every store in `stores` has listed its objects.
fn mark_ready(stores: Vec<Store<DynamicObject>>, flag: Arc<AtomicBool>) {
    tokio::spawn(async move {
        for store in stores {
            if store.wait_until_ready().await.is_err() {
                return;
            }
        }
        flag.store(true, Ordering::Release);
    });
}

/// Polls the reflector stream until it ends, logging watch errors (the default backoff
/// retries them).
async fn drive<S>(what: &'static str, stream: S)
where
    S: WatchStreamExt<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        if let Err(e) = item {
            tracing::warn!(error = %super::redact::in_text(&e.to_string()), watched = what, "watch failed; retrying");
        }
    }
    tracing::warn!(watched = what, "the watch ended");
}

/// Starts the list+watches in `scope` on background tasks and returns the cache (empty until
/// the first lists arrive; see [`OwnerCache::wait_until_ready`]).
pub async fn start(client: kube::Client, scope: WatchScope) -> OwnerCache {
    let mut selected = watcher::Config::default();
    if !scope.label_selector.trim().is_empty() {
        selected = selected.labels(scope.label_selector.trim());
    }
    let namespaces: Vec<Option<String>> = if scope.namespaces.is_empty() {
        vec![None]
    } else {
        let mut ns = scope.namespaces.clone();
        ns.sort();
        ns.dedup();
        ns.into_iter().map(Some).collect()
    };
    let watch = |resource: &ApiResource, config: watcher::Config, what: &'static str| {
        let mut stores = Vec::new();
        for ns in &namespaces {
            let api: Api<DynamicObject> = match ns {
                None => Api::all_with(client.clone(), resource),
                Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
            };
            let writer = reflector::store::Writer::new(resource.clone());
            stores.push((ns.clone(), writer.as_reader()));
            let stream = watcher(api, config.clone())
                .default_backoff()
                .reflect(writer);
            tokio::spawn(drive(what, stream));
        }
        stores
    };
    let workloads = WorkloadKind::all()
        .filter_map(|kind| {
            let config = match kind.spec().watch {
                Watch::No => return None,
                Watch::Selected => selected.clone(),
                Watch::Every => watcher::Config::default(),
            };
            let resource = resource_of(kind);
            let stores = watch(&resource, config, kind.as_str());
            let ready = Arc::new(AtomicBool::new(false));
            mark_ready(
                stores.iter().map(|(_, s)| s.clone()).collect(),
                ready.clone(),
            );
            Some(Watched {
                kind,
                resource,
                stores,
                ready,
            })
        })
        .collect();
    let services = watch(&service_resource(), watcher::Config::default(), "Services");
    // TrainJob runtimes: every namespaced one in the watched namespaces (runtimes carry no
    // launch labels), and the cluster-scoped ones. They do not hold up readiness: until a
    // kind has listed, its runtimes are unknown and the queue's `unverifiableRuntime` decides.
    let namespaced = watch(
        &runtime_resource(NAMESPACED_RUNTIME),
        watcher::Config::default(),
        "TrainingRuntimes",
    );
    let cluster_resource = runtime_resource(CLUSTER_RUNTIME);
    let writer = reflector::store::Writer::new(cluster_resource.clone());
    let cluster = writer.as_reader();
    let stream = watcher(
        Api::<DynamicObject>::all_with(client.clone(), &cluster_resource),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer);
    tokio::spawn(drive("ClusterTrainingRuntimes", stream));
    let runtimes = RuntimeStores {
        cluster: cluster.clone(),
        namespaced: namespaced.clone(),
        cluster_ready: Arc::new(AtomicBool::new(false)),
        namespaced_ready: Arc::new(AtomicBool::new(false)),
    };
    mark_ready(vec![cluster], runtimes.cluster_ready.clone());
    mark_ready(
        namespaced.into_iter().map(|(_, s)| s).collect(),
        runtimes.namespaced_ready.clone(),
    );
    // DRA claim templates and claims: every one in the watched namespaces (they carry no
    // launch labels). Not waited for: until listed, a pod's claims cannot be counted.
    let dra = DraKind::ALL
        .into_iter()
        .map(|kind| {
            let stores = watch(
                &dra_resource(kind),
                watcher::Config::default(),
                kind.plural(),
            );
            let ready = Arc::new(AtomicBool::new(false));
            mark_ready(
                stores.iter().map(|(_, s)| s.clone()).collect(),
                ready.clone(),
            );
            DraStores {
                kind,
                stores,
                ready,
            }
        })
        .collect();
    OwnerCache {
        workloads,
        services,
        runtimes,
        dra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the RBAC is generated from is what `start` watches: every kind whose descriptor asks
    /// for a watch, by its resource, then the lookups of every kind.
    #[test]
    fn the_watched_list_names_every_watched_kind() {
        let list = watched();
        for kind in WorkloadKind::all() {
            let (group, _, resource) = kind.api_resource();
            let listed = list
                .iter()
                .any(|w| w.group == group && w.resources.iter().any(|r| r == resource));
            assert_eq!(listed, kind.spec().watch != Watch::No, "{kind:?}");
        }
        assert!(list.iter().any(|w| w.resources == ["services"]));
        assert_eq!(list.iter().filter(|w| !w.namespaced).count(), 1);
    }

    #[test]
    fn a_volcano_job_is_watched_as_batch_volcano_sh_jobs() {
        let volcano = WorkloadKind::all()
            .find(|k| k.spec().watch == Watch::Selected)
            .unwrap();
        let r = resource_of(volcano);
        assert_eq!(r.api_version, "batch.volcano.sh/v1alpha1");
        assert_eq!(r.plural, "jobs");
        assert_eq!(r.kind, "Job");
    }
}
