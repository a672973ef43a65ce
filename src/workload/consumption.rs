//! What a pod consumes: the one model every per-pod limit, total, GPU-hour ceiling and the
//! gang read.
//!
//! A pod asks for accelerators in several ways, and a rule that reads one resource name misses
//! the others:
//!
//! * an extended resource on a container (`nvidia.com/gpu`, `amd.com/gpu`, a MIG slice
//!   `nvidia.com/mig-3g.40gb`, `gpu.intel.com/xe`, or a DeviceClass's extended name
//!   `deviceclass.resource.kubernetes.io/<class>`);
//! * pod-level resources (`spec.resources`), which bound the containers together;
//! * Dynamic Resource Allocation: `spec.resourceClaims` naming a ResourceClaimTemplate (one
//!   claim per pod) or a ResourceClaim (shared by every pod that names it), whose requests ask
//!   for devices of a DeviceClass (`exactly`, `allocationMode: All`, `firstAvailable`).
//!
//! The accelerator map (`accelerators` in the config, [`Accelerators`]) says how many GPUs each
//! resource name and each device of a DeviceClass counts as. Claims are read through a
//! [`ClaimSource`] (the cluster view, or the manifests given offline). What cannot be counted —
//! a DeviceClass the map does not know, `allocationMode: All` without a bound, a claim or
//! template that cannot be read — is said, with why, so a queue that limits GPUs denies it.

use crate::cluster::{ClusterView, DraKind, RuntimeLookup};
use crate::error::ConfigError;
use crate::json;
use crate::quantity::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use wildmatch::WildMatch;

use super::{ContainerRole, containers, pod_spec};

/// The prefix of the extended resource name any DeviceClass is served under (KEP-5004).
pub const DEVICE_CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// The value of a resource entry that counts a MIG profile by its compute slices.
pub const MIG_SLICES: &str = "migSlices";

/// `accelerators` in the config: how many GPUs each way of asking for one counts as.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct AcceleratorsConfig {
    /// Extended resource names (exact, or a pattern with `*` and `?`; each has its domain, as
    /// `nvidia.com/gpu` does) → how many GPUs one unit counts as: a quantity (`1`, `0.5`), or `migSlices` — a MIG profile
    /// `nvidia.com/mig-<g>g.<memory>` counts `g`/7 of a GPU, rounded up to a thousandth (a
    /// `7g` profile is one GPU). An exact name wins over a pattern, a longer pattern over a
    /// shorter one. Giving the map replaces the built-in one: keep the entries you need.
    pub resources: BTreeMap<String, Value>,
    /// DRA DeviceClasses → how each device of the class counts: `gpusPerDevice` (a quantity;
    /// `0` for a class that is no accelerator, such as a network interface) and, for requests
    /// with `allocationMode: All`, `allDevicesAtMost` (the most devices of the class one
    /// request can get; without it such a request cannot be counted). A class the map does not
    /// name cannot be counted either. Giving the map replaces the built-in one.
    pub device_classes: BTreeMap<String, DeviceClassConfig>,
}

/// How the devices of one DeviceClass count.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceClassConfig {
    /// How many GPUs one device of the class counts as (a quantity).
    pub gpus_per_device: Value,
    /// The most devices of the class a request with `allocationMode: All` can get (every
    /// device of the class on a node): without it, such a request cannot be counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_devices_at_most: Option<i64>,
}

impl Default for AcceleratorsConfig {
    fn default() -> Self {
        let q = |v: &str| Value::String(v.to_string());
        let resources = BTreeMap::from([
            // nvidia.com/gpu, amd.com/gpu and every vendor's `<domain>/gpu`.
            ("*/gpu".to_string(), q("1")),
            ("nvidia.com/mig-*".to_string(), q(MIG_SLICES)),
            // The A30 has four slices, not seven: its 4g profile is a whole GPU.
            ("nvidia.com/mig-1g.6gb".to_string(), q("0.25")),
            ("nvidia.com/mig-2g.12gb".to_string(), q("0.5")),
            ("nvidia.com/mig-4g.24gb".to_string(), q("1")),
            ("gpu.intel.com/i915".to_string(), q("1")),
            ("gpu.intel.com/xe".to_string(), q("1")),
        ]);
        let class = |gpus: &str| DeviceClassConfig {
            gpus_per_device: q(gpus),
            all_devices_at_most: None,
        };
        let device_classes = BTreeMap::from([
            ("gpu.nvidia.com".to_string(), class("1")),
            // A MIG device whose profile the class does not fix: counted as a whole GPU.
            ("mig.nvidia.com".to_string(), class("1")),
            ("gpu.amd.com".to_string(), class("1")),
            ("gpu.intel.com".to_string(), class("1")),
            // NVIDIA's ComputeDomain channels and daemons: no GPU of their own.
            (
                "compute-domain-default-channel.nvidia.com".to_string(),
                class("0"),
            ),
            ("compute-domain-daemon.nvidia.com".to_string(), class("0")),
        ]);
        AcceleratorsConfig {
            resources,
            device_classes,
        }
    }
}

/// How one unit of a resource counts.
#[derive(Debug, Clone, PartialEq)]
enum Weight {
    Gpus(Quantity),
    MigSlices,
}

/// A resource name pattern: one `*` (`*/gpu`, `nvidia.com/mig-*`) compared as a prefix and a
/// suffix, which every review reads for each resource name; any other through `wildmatch`.
#[derive(Debug, Clone)]
enum Pattern {
    Around(String, String),
    Wild(WildMatch),
}

impl Pattern {
    fn new(pattern: &str) -> Self {
        match pattern.split_once('*') {
            Some((prefix, suffix)) if !pattern.contains('?') && !suffix.contains('*') => {
                Pattern::Around(prefix.to_string(), suffix.to_string())
            }
            _ => Pattern::Wild(WildMatch::new(pattern)),
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Around(prefix, suffix) => {
                name.len() >= prefix.len() + suffix.len()
                    && name.starts_with(prefix.as_str())
                    && name.ends_with(suffix.as_str())
            }
            Pattern::Wild(w) => w.matches(name),
        }
    }
}

/// How an entry of the accelerator map matches a resource name ([`Accelerators::name_rules`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameMatch<'a> {
    /// Exactly this name.
    Exact(&'a str),
    /// A name at least as long as both, starting with the first and ending with the second (a
    /// pattern with one `*`).
    Around(&'a str, &'a str),
    /// A pattern with `*` (any characters) and `?` (one character).
    Wild(&'a str),
}

/// The compiled accelerator map.
#[derive(Debug, Clone)]
pub struct Accelerators {
    exact: BTreeMap<String, Weight>,
    /// Longest pattern first.
    patterns: Vec<(String, Pattern, Weight)>,
    classes: BTreeMap<String, (Quantity, Option<i64>)>,
}

impl Default for Accelerators {
    fn default() -> Self {
        Accelerators::compile(&AcceleratorsConfig::default(), "accelerators")
            .expect("the built-in accelerator map compiles")
    }
}

/// A quantity written as a number or a string, at least zero.
fn gpus_of(value: &Value, at: &str, errors: &mut Vec<ConfigError>) -> Option<Quantity> {
    match Quantity::from_json(value) {
        Some(Ok(q)) if !q.is_negative() => Some(q),
        Some(Ok(_)) => {
            errors.push(ConfigError::new(at, "must not be negative"));
            None
        }
        Some(Err(e)) => {
            errors.push(ConfigError::new(at, format!("not a quantity: {e}")));
            None
        }
        None => {
            errors.push(ConfigError::new(
                at,
                format!("expected a quantity (a number or a string such as \"0.5\"), got {value}"),
            ));
            None
        }
    }
}

impl Accelerators {
    /// Checks and compiles `cfg`, found at `at`. Every problem is reported with its key path.
    pub fn compile(cfg: &AcceleratorsConfig, at: &str) -> Result<Self, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut exact = BTreeMap::new();
        let mut patterns = Vec::new();
        for (name, value) in &cfg.resources {
            let key = format!("{at}.resources.{name}");
            // An extended resource has a domain; a name without one (`cpu`, `memory`) is the
            // kubelet's own, never an accelerator, and is not looked up.
            if !name.contains('/') {
                errors.push(ConfigError::new(
                    key,
                    "an extended resource name has a domain (`nvidia.com/gpu`, `*/gpu`): a name without `/` is one of Kubernetes' own resources",
                ));
                continue;
            }
            if name.starts_with(DEVICE_CLASS_RESOURCE_PREFIX) {
                errors.push(ConfigError::new(
                    key,
                    format!(
                        "a DeviceClass's extended name counts as its class: map the class under {at}.deviceClasses"
                    ),
                ));
                continue;
            }
            let weight = if value.as_str() == Some(MIG_SLICES) {
                Weight::MigSlices
            } else {
                match gpus_of(value, &key, &mut errors) {
                    Some(q) => Weight::Gpus(q),
                    None => continue,
                }
            };
            if name.contains(['*', '?']) {
                patterns.push((name.clone(), Pattern::new(name), weight));
            } else {
                exact.insert(name.clone(), weight);
            }
        }
        patterns.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        let mut classes = BTreeMap::new();
        for (name, class) in &cfg.device_classes {
            let key = format!("{at}.deviceClasses.{name}");
            let gpus = gpus_of(
                &class.gpus_per_device,
                &format!("{key}.gpusPerDevice"),
                &mut errors,
            );
            if let Some(n) = class.all_devices_at_most
                && n < 0
            {
                errors.push(ConfigError::new(
                    format!("{key}.allDevicesAtMost"),
                    "must not be negative",
                ));
                continue;
            }
            if let Some(gpus) = gpus {
                classes.insert(name.clone(), (gpus, class.all_devices_at_most));
            }
        }
        if errors.is_empty() {
            Ok(Accelerators {
                exact,
                patterns,
                classes,
            })
        } else {
            Err(errors)
        }
    }

    /// How many GPUs one unit of `resource` counts as; `None` for a resource that is no
    /// accelerator (or a DeviceClass's extended name whose class the map does not know:
    /// [`Accelerators::resource_gpus`] says so).
    pub fn gpus_per_unit(&self, resource: &str) -> Option<Quantity> {
        // Every name and pattern of the map has a domain ([`Accelerators::compile`]).
        if !resource.contains('/') {
            return None;
        }
        if let Some(class) = resource.strip_prefix(DEVICE_CLASS_RESOURCE_PREFIX) {
            return self.classes.get(class).map(|(gpus, _)| *gpus);
        }
        let weight = self.exact.get(resource).or_else(|| {
            self.patterns
                .iter()
                .find(|(_, p, _)| p.matches(resource))
                .map(|(_, _, w)| w)
        })?;
        match weight {
            Weight::Gpus(q) => Some(*q),
            Weight::MigSlices => Some(mig_slices(resource).unwrap_or(Quantity::from_int(1))),
        }
    }

    /// The map's resource names as the native compiler reads them: how each entry matches a
    /// name and whether one unit counts as any GPU, exact names first, then the patterns in
    /// the order they are tried; the first that matches decides ([`Accelerators::gpus_per_unit`]).
    /// A DeviceClass's extended name is none of these ([`Accelerators::device_classes`]).
    pub fn name_rules(&self) -> Vec<(NameMatch<'_>, bool)> {
        let counts = |w: &Weight| match w {
            Weight::Gpus(q) => *q != Quantity::ZERO,
            Weight::MigSlices => true,
        };
        let exact = self
            .exact
            .iter()
            .map(|(name, w)| (NameMatch::Exact(name), counts(w)));
        let patterns = self.patterns.iter().map(|(text, pattern, w)| {
            let by = match pattern {
                Pattern::Around(prefix, suffix) => NameMatch::Around(prefix, suffix),
                Pattern::Wild(_) => NameMatch::Wild(text),
            };
            (by, counts(w))
        });
        exact.chain(patterns).collect()
    }

    /// Every DeviceClass the map knows, and whether a device of it counts as any GPU.
    pub fn device_classes(&self) -> Vec<(&str, bool)> {
        self.classes
            .iter()
            .map(|(name, (gpus, _))| (name.as_str(), *gpus != Quantity::ZERO))
            .collect()
    }

    /// True for a resource name that counts as a whole GPU per unit (`nvidia.com/gpu`): a limit
    /// on it is a limit on GPUs, however they are asked for.
    pub fn is_gpu(&self, resource: &str) -> bool {
        self.gpus_per_unit(resource) == Some(Quantity::from_int(1))
    }

    /// What `amount` of `resource` counts as: `Ok(None)` for no accelerator, the GPUs, or why
    /// it cannot be counted (a DeviceClass's extended name of an unknown class).
    pub fn resource_gpus(
        &self,
        resource: &str,
        amount: Quantity,
    ) -> Result<Option<Quantity>, String> {
        if let Some(class) = resource.strip_prefix(DEVICE_CLASS_RESOURCE_PREFIX)
            && !self.classes.contains_key(class)
        {
            return Err(format!(
                "{resource} asks for devices of DeviceClass {class:?}, which the accelerator map (accelerators.deviceClasses) does not count"
            ));
        }
        Ok(self
            .gpus_per_unit(resource)
            .and_then(|w| w.checked_mul(&amount)))
    }
}

/// `g`/7 for `nvidia.com/mig-<g>g.<memory>` (a `7g` profile is one GPU), rounded up to a
/// thousandth.
fn mig_slices(resource: &str) -> Option<Quantity> {
    let profile = resource.split_once("mig-")?.1;
    let g: i64 = profile.split_once('g')?.0.parse().ok()?;
    if !(1..=7).contains(&g) {
        return None;
    }
    let millis = (g * 1000 + 6) / 7;
    Quantity::parse(&format!("{millis}m")).ok()
}

/// The GPUs a pod template asks for, by the accelerator map.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodGpus {
    /// Per container (in the walk's order, with its slot's list and index and name): its GPUs
    /// and how they are asked for (`nvidia.com/gpu: 2`, `claim gpus: ResourceClaimTemplate
    /// 8-gpus: 8 × gpu.nvidia.com`).
    pub containers: Vec<ContainerGpus>,
    /// The pod's GPUs by the kubelet's rule (app containers and native sidecars together,
    /// against the largest init container), raised to its pod-level resources, plus the devices
    /// of its per-pod claims (once each, whether or not a container names them); without the
    /// claims shared with other pods.
    pub per_pod: Quantity,
    /// The pre-created ResourceClaims the pod names (shared by every pod that names them): by
    /// name, their GPUs. Counted once per workload.
    pub shared: Vec<(String, Quantity, String)>,
    /// How the per-pod GPUs are asked for, for messages.
    pub parts: Vec<String>,
    /// What cannot be counted, with why.
    pub uncounted: Vec<String>,
    /// GPUs asked for other than by whole-GPU resource names on containers (claims, MIG
    /// slices, DeviceClass extended names, pod-level resources).
    pub other_ways: bool,
    /// The resource names the containers ask for GPUs by.
    pub names: Vec<String>,
}

/// One container's GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerGpus {
    /// `containers` or `initContainers`.
    pub list: &'static str,
    pub index: usize,
    pub name: String,
    pub role: ContainerRole,
    pub gpus: Quantity,
    /// How they are asked for.
    pub parts: Vec<String>,
    /// GPUs asked for other than by whole-GPU resource names (claims, MIG slices, a
    /// DeviceClass's extended name): what a per-container limit on `nvidia.com/gpu` does not
    /// read by name.
    pub other_ways: bool,
}

/// What a claim (or one of its requests) gives, counted.
#[derive(Debug, Clone)]
struct ClaimCount {
    /// By request name: the GPUs of each request.
    requests: Vec<(String, Quantity)>,
    /// How it is asked for.
    text: String,
}

impl ClaimCount {
    fn total(&self) -> Option<Quantity> {
        self.requests
            .iter()
            .try_fold(Quantity::ZERO, |t, (_, q)| t.checked_add(q))
    }
    /// The GPUs of `request` (a request of the claim, or a subrequest `request/sub`), or of
    /// the whole claim.
    fn of(&self, request: Option<&str>) -> Option<Quantity> {
        match request {
            None => self.total(),
            Some(r) => {
                let base = r.split('/').next().unwrap_or(r);
                self.requests
                    .iter()
                    .find(|(n, _)| n == base)
                    .map(|(_, q)| *q)
                    .or_else(|| self.total())
            }
        }
    }
}

/// Counts the devices a claim spec (`spec.devices`) asks for. `Err`: why it cannot be counted.
fn count_claim_spec(
    accel: &Accelerators,
    spec: Option<&Value>,
    what: &str,
) -> Result<ClaimCount, String> {
    let requests = spec
        .and_then(|s| s.get("devices"))
        .and_then(|d| d.get("requests"))
        .and_then(Value::as_array);
    let mut out = Vec::new();
    let mut texts = Vec::new();
    for request in requests.into_iter().flatten() {
        let name = request
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        // resource.k8s.io/v1: `exactly` or `firstAvailable`; v1beta1 put `exactly`'s fields on
        // the request itself.
        let (gpus, text) =
            if let Some(subs) = request.get("firstAvailable").and_then(Value::as_array) {
                // The scheduler takes the first that fits: the worst case is the largest.
                let mut most = Quantity::ZERO;
                let mut shown = Vec::new();
                for sub in subs {
                    let (q, t) = count_exact(accel, sub, what)?;
                    most = most.max(q);
                    shown.push(t);
                }
                (most, format!("firstAvailable of [{}]", shown.join(", ")))
            } else {
                let exact = request.get("exactly").unwrap_or(request);
                count_exact(accel, exact, what)?
            };
        texts.push(text);
        out.push((name, gpus));
    }
    Ok(ClaimCount {
        requests: out,
        text: texts.join(" + "),
    })
}

/// One exact request (or subrequest): its count × the GPUs per device of its class.
fn count_exact(
    accel: &Accelerators,
    exact: &Value,
    what: &str,
) -> Result<(Quantity, String), String> {
    let class = exact
        .get("deviceClassName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(&(per_device, all_at_most)) = accel.classes.get(class) else {
        return Err(format!(
            "{what} asks for devices of DeviceClass {class:?}, which the accelerator map (accelerators.deviceClasses) does not count"
        ));
    };
    let mode = exact
        .get("allocationMode")
        .and_then(Value::as_str)
        .unwrap_or("ExactCount");
    let count = match mode {
        "All" => match all_at_most {
            Some(n) => n,
            None if per_device == Quantity::ZERO => 0,
            None => {
                return Err(format!(
                    "{what} asks for every device of DeviceClass {class:?} (allocationMode: All), which has no bound in the accelerator map (accelerators.deviceClasses.{class}.allDevicesAtMost)"
                ));
            }
        },
        _ => exact
            .get("count")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0),
    };
    let gpus = per_device
        .checked_mul_int(count)
        .ok_or_else(|| format!("{what} asks for too many devices to count"))?;
    let text = if mode == "All" {
        format!("all ≤ {count} × {class}")
    } else {
        format!("{count} × {class}")
    };
    Ok((gpus, text))
}

/// What one pod-level claim entry (`spec.resourceClaims[i]`) resolves to.
enum Resolved {
    /// One claim per pod, from a template.
    PerPod(ClaimCount),
    /// A ResourceClaim shared by every pod that names it.
    Shared(String, ClaimCount),
}

/// A pod spec's claims, each resolved once ([`Accounting::claims`]).
#[derive(Default)]
pub struct PodClaims {
    /// By the name the pod's containers use.
    resolved: Vec<(String, Resolved)>,
    /// By name: the claims whose devices cannot be counted, with why.
    uncounted: Vec<(String, String)>,
}

/// What one container asks for, by the accelerator map ([`Accounting::container`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerAsk<'c> {
    /// The GPUs it asks for by resource names (each its limit, else its request).
    pub named: Quantity,
    /// What it sees: `named` and the devices of every claim it uses.
    pub gpus: Quantity,
    /// How they are asked for: first one part per name of `names`, then one per claim.
    pub parts: Vec<String>,
    /// GPUs asked for other than by whole-GPU resource names (claims, MIG slices, a
    /// DeviceClass's extended name).
    pub other_ways: bool,
    /// The resource names it asks for GPUs by.
    pub names: Vec<&'c str>,
    /// Why a resource name it asks by cannot be counted (a DeviceClass's extended name the
    /// map does not know).
    pub uncounted: Vec<String>,
    /// It uses a claim whose devices cannot be counted (the pod's count says why).
    pub uses_uncounted_claim: bool,
    /// Its GPUs are too many to add up.
    pub overflow: bool,
}

impl ContainerAsk<'_> {
    /// True when the container asks for no GPU: none by any resource name the accelerator map
    /// counts, no claim it uses whose devices count as GPUs, and nothing it asks for that cannot
    /// be counted (which may be a GPU).
    pub fn asks_no_gpu(&self) -> bool {
        self.gpus == Quantity::ZERO
            && self.uncounted.is_empty()
            && !self.uses_uncounted_claim
            && !self.overflow
    }
}

/// Counts GPUs through one accelerator map, reading claims from one source, in one namespace.
pub struct Accounting<'a> {
    pub accelerators: &'a Accelerators,
    /// Where the ResourceClaimTemplates and ResourceClaims pods name are read.
    pub claims: &'a dyn ClusterView,
    /// The workload's namespace, where its pods' claims are.
    pub namespace: &'a str,
}

impl std::fmt::Debug for Accounting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accounting")
            .field("accelerators", self.accelerators)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// The built-in accelerator map with no cluster to read claims from (a claim cannot be counted).
#[cfg(test)]
pub fn offline() -> Accounting<'static> {
    static BUILT_IN: std::sync::LazyLock<Accelerators> =
        std::sync::LazyLock::new(Accelerators::default);
    Accounting {
        accelerators: &BUILT_IN,
        claims: &crate::cluster::NoCluster,
        namespace: crate::cluster::DEFAULT_NAMESPACE,
    }
}

impl Accounting<'_> {
    /// True when the pod spec asks for GPUs some way other than `names` on its containers:
    /// claims, pod-level resources, or another accelerator name (a MIG slice, a DeviceClass's
    /// extended name). A scan of the spec: a pod that asks by name only is not modelled.
    pub fn asks_beyond(&self, spec: &Map<String, Value>, names: &[&str]) -> bool {
        let has = |key: &str| {
            json::member(spec, key).is_some_and(|v| match v {
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                _ => false,
            })
        };
        if has("resourceClaims") || has("resources") {
            return true;
        }
        any_resource_name(spec, |r| {
            !names.contains(&r)
                && (r.starts_with(DEVICE_CLASS_RESOURCE_PREFIX)
                    || self.accelerators.gpus_per_unit(r).is_some())
        })
    }

    /// True when the pod spec asks for devices that might not be countable: claims, or a
    /// DeviceClass's extended name. A scan of the spec.
    pub fn may_be_uncounted(&self, spec: &Map<String, Value>) -> bool {
        json::member(spec, "resourceClaims")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
            || any_resource_name(spec, |r| r.starts_with(DEVICE_CLASS_RESOURCE_PREFIX))
    }

    /// The resource names a `resources` block asks for GPUs by.
    pub fn gpu_names<'v>(&self, resources: Option<&'v Value>) -> Vec<&'v str> {
        resource_amounts(resources)
            .into_iter()
            .filter(|(r, q)| {
                self.accelerators
                    .resource_gpus(r, *q)
                    .is_ok_and(|g| g.is_some_and(|g| g != Quantity::ZERO))
            })
            .map(|(r, _)| r)
            .collect()
    }

    /// The GPUs a `resources` block asks for by resource names.
    pub fn named_gpus(&self, resources: Option<&Value>) -> Quantity {
        named_gpus(self.accelerators, resources)
    }

    /// Resolves one entry of `spec.resourceClaims`.
    fn resolve(&self, entry: &Map<String, Value>) -> Result<Option<(String, Resolved)>, String> {
        let name = json::member(entry, "name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let text = |key: &str| {
            json::member(entry, key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let (kind, object_name) = if let Some(t) = text("resourceClaimTemplateName") {
            (DraKind::ResourceClaimTemplate, t)
        } else if let Some(c) = text("resourceClaimName") {
            (DraKind::ResourceClaim, c)
        } else {
            return Ok(None);
        };
        let what = format!("claim {name:?} ({} {object_name})", kind.as_str());
        let object = match self.claims.dra_object(kind, self.namespace, object_name) {
            RuntimeLookup::Found(o) => o,
            RuntimeLookup::NotFound => {
                return Err(format!(
                    "{what} is not in namespace {:?}, so its devices cannot be counted",
                    self.namespace
                ));
            }
            RuntimeLookup::Unavailable => {
                return Err(format!(
                    "{what} cannot be read (offline without its manifest beside the workload, `serve` without --cluster-lookups, or no access to resource.k8s.io), so its devices cannot be counted"
                ));
            }
        };
        let spec = match kind {
            DraKind::ResourceClaimTemplate => object.get("spec").and_then(|s| s.get("spec")),
            DraKind::ResourceClaim => object.get("spec"),
        };
        let mut count = count_claim_spec(self.accelerators, spec, &what)?;
        count.text = format!("{what}: {}", count.text);
        Ok(Some(match kind {
            DraKind::ResourceClaimTemplate => (name, Resolved::PerPod(count)),
            DraKind::ResourceClaim => (name, Resolved::Shared(object_name.to_string(), count)),
        }))
    }

    /// The claims of a pod spec (`spec.resourceClaims`), each resolved once: what its
    /// containers use. Nothing is read for a pod that names no claim.
    pub fn claims(&self, spec: &Map<String, Value>) -> PodClaims {
        let mut out = PodClaims::default();
        for entry in json::member(spec, "resourceClaims")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
        {
            match self.resolve(entry) {
                Ok(Some(resolved)) => out.resolved.push(resolved),
                Ok(None) => {}
                Err(why) => {
                    let name = json::member(entry, "name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    out.uncounted.push((name, why));
                }
            }
        }
        out
    }

    /// What one container asks for, by the accelerator map: its resource names (limit, else
    /// request) and the devices of every claim of `claims` it uses. The one count of a
    /// container: [`Accounting::pod`] adds these up, and whether a container asks for no GPU
    /// ([`ContainerAsk::asks_no_gpu`]) is read from it.
    pub fn container<'c>(
        &self,
        container: &'c Map<String, Value>,
        claims: &PodClaims,
    ) -> ContainerAsk<'c> {
        let mut out = ContainerAsk::default();
        let add = |total: Quantity, q: Quantity, overflow: &mut bool| {
            total.checked_add(&q).unwrap_or_else(|| {
                *overflow = true;
                total
            })
        };
        let resources = json::member(container, "resources");
        for (resource, amount) in resource_amounts(resources) {
            match self.accelerators.resource_gpus(resource, amount) {
                Ok(Some(q)) if q != Quantity::ZERO => {
                    out.named = add(out.named, q, &mut out.overflow);
                    out.other_ways |= !self.accelerators.is_gpu(resource);
                    out.names.push(resource);
                    out.parts.push(format!("{resource}: {amount}"));
                }
                Ok(_) => {}
                Err(why) => out.uncounted.push(why),
            }
        }
        // What the container sees: its named resources and every claim it uses.
        out.gpus = out.named;
        for used in resources
            .and_then(|r| r.get("claims"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = used.get("name").and_then(Value::as_str).unwrap_or_default();
            let request = used.get("request").and_then(Value::as_str);
            if claims.uncounted.iter().any(|(n, _)| n == name) {
                out.uses_uncounted_claim = true;
                continue;
            }
            let Some((_, resolved)) = claims.resolved.iter().find(|(n, _)| n == name) else {
                continue;
            };
            let (count, shared) = match resolved {
                Resolved::PerPod(c) => (c, ""),
                Resolved::Shared(_, c) => (c, ", shared with other pods"),
            };
            match count.of(request) {
                Some(q) if q != Quantity::ZERO => {
                    out.other_ways = true;
                    out.gpus = add(out.gpus, q, &mut out.overflow);
                    out.parts.push(format!("{} ({q} GPUs{shared})", count.text));
                }
                Some(_) => {}
                None => out.overflow = true,
            }
        }
        out
    }

    /// The GPUs `template` (a pod template: `metadata` + `spec`) asks for.
    pub fn pod(&self, template: &Map<String, Value>) -> PodGpus {
        let mut out = PodGpus::default();
        let Some(spec) = pod_spec(template) else {
            return out;
        };
        // The pod's claims, by the name its containers use.
        let claims = self.claims(spec);
        out.uncounted
            .extend(claims.uncounted.iter().map(|(_, why)| why.clone()));
        let overflow = std::cell::Cell::new(false);
        let add = |total: Quantity, q: Quantity| {
            total.checked_add(&q).unwrap_or_else(|| {
                overflow.set(true);
                total
            })
        };
        // By the kubelet's rule, over what each container asks for by name: app containers
        // and native sidecars together, against the largest init container (with the
        // sidecars started before it).
        let mut app = Quantity::ZERO;
        let mut sidecars = Quantity::ZERO;
        let mut init_peak = Quantity::ZERO;
        for (slot, container) in containers(spec, &[]) {
            let ask = self.container(container, &claims);
            let named = ask.named;
            if ask.overflow {
                overflow.set(true);
            }
            out.uncounted.extend(ask.uncounted);
            for name in &ask.names {
                if !out.names.iter().any(|n| n == name) {
                    out.names.push(name.to_string());
                }
            }
            match slot.role {
                ContainerRole::App | ContainerRole::ConfiguredSidecar => app = add(app, named),
                ContainerRole::Sidecar => {
                    sidecars = add(sidecars, named);
                    init_peak = init_peak.max(sidecars);
                }
                ContainerRole::Init => init_peak = init_peak.max(add(named, sidecars)),
            }
            if named != Quantity::ZERO {
                out.parts.push(format!(
                    "{}[{}] {}",
                    slot.list,
                    slot.index,
                    ask.parts[..ask.names.len()].join(" + ")
                ));
            }
            out.other_ways |= ask.other_ways;
            out.containers.push(ContainerGpus {
                list: slot.list,
                index: slot.index,
                name: super::name_in(container).unwrap_or_default().to_string(),
                role: slot.role,
                gpus: ask.gpus,
                parts: ask.parts,
                other_ways: ask.other_ways,
            });
        }
        let mut per_pod = add(app, sidecars).max(init_peak);
        // Pod-level resources bound the containers together: the pod has at least them.
        let pod_level = named_gpus(self.accelerators, json::member(spec, "resources"));
        if pod_level > per_pod {
            out.parts
                .push(format!("pod-level spec.resources ({pod_level} GPUs)"));
            out.other_ways = true;
            per_pod = pod_level;
        }
        // A claim's devices are allocated to the pod once, however many of its containers use
        // them (or none): one per pod from a template, one per workload when shared.
        for (_, resolved) in &claims.resolved {
            match resolved {
                Resolved::PerPod(count) => match count.total() {
                    Some(q) if q != Quantity::ZERO => {
                        out.other_ways = true;
                        per_pod = add(per_pod, q);
                        out.parts.push(format!("{} ({q} GPUs per pod)", count.text));
                    }
                    Some(_) => {}
                    None => overflow.set(true),
                },
                Resolved::Shared(claim, count) => match count.total() {
                    Some(q) if q != Quantity::ZERO => {
                        out.other_ways = true;
                        out.shared.push((claim.clone(), q, count.text.clone()))
                    }
                    Some(_) => {}
                    None => overflow.set(true),
                },
            }
        }
        if overflow.get() {
            out.uncounted
                .push("the pod asks for too many GPUs to count".to_string());
        }
        out.per_pod = per_pod;
        out
    }
}

/// True when a container of the pod spec has a resource (limit or request) whose name is
/// `wanted`.
fn any_resource_name(spec: &Map<String, Value>, wanted: impl Fn(&str) -> bool) -> bool {
    containers(spec, &[]).any(|(_, c)| {
        let resources = json::member(c, "resources");
        ["limits", "requests"].into_iter().any(|kind| {
            resources
                .and_then(|r| r.get(kind))
                .and_then(Value::as_object)
                .is_some_and(|m| m.keys().any(|r| wanted(r)))
        })
    })
}

/// Every resource of a `resources` block with the amount it counts: its limit, else its
/// request (a claim list is no amount).
fn resource_amounts(resources: Option<&Value>) -> Vec<(&str, Quantity)> {
    let mut out: Vec<(&str, Quantity)> = Vec::new();
    for kind in ["limits", "requests"] {
        let Some(map) = resources
            .and_then(|r| r.get(kind))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (name, value) in map {
            if out.iter().any(|(n, _)| *n == name) {
                continue;
            }
            if let Some(Ok(q)) = Quantity::from_json(value) {
                out.push((name.as_str(), q));
            }
        }
    }
    out
}

/// The GPUs a `resources` block asks for by resource names (extended resources, MIG slices,
/// DeviceClass extended names of known classes).
fn named_gpus(accel: &Accelerators, resources: Option<&Value>) -> Quantity {
    resource_amounts(resources)
        .into_iter()
        .filter_map(|(r, q)| accel.resource_gpus(r, q).ok().flatten())
        .fold(Quantity::ZERO, |t, q| t.checked_add(&q).unwrap_or(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_wildmatch_does() {
        for (pattern, name) in [
            ("*/gpu", "nvidia.com/gpu"),
            ("*/gpu", "amd.com/gpu"),
            ("*/gpu", "gpu"),
            ("*/gpu", "/gpu"),
            ("*/gpu", "nvidia.com/gpus"),
            ("nvidia.com/mig-*", "nvidia.com/mig-1g.10gb"),
            ("nvidia.com/mig-*", "nvidia.com/mig-"),
            ("nvidia.com/mig-*", "nvidia.com/gpu"),
            ("a*a", "a"),
            ("a*a", "aa"),
            ("x?/*", "xy/z"),
            ("*.*", "a.b"),
        ] {
            assert_eq!(
                Pattern::new(pattern).matches(name),
                WildMatch::new(pattern).matches(name),
                "{pattern} ~ {name}"
            );
        }
    }

    #[test]
    fn the_built_in_map_counts_gpus_mig_slices_and_classes() {
        let a = Accelerators::default();
        let q = |s: &str| Some(Quantity::parse(s).unwrap());
        assert_eq!(a.gpus_per_unit("nvidia.com/gpu"), q("1"));
        assert_eq!(a.gpus_per_unit("amd.com/gpu"), q("1"));
        assert_eq!(a.gpus_per_unit("gpu.intel.com/xe"), q("1"));
        assert_eq!(a.gpus_per_unit("nvidia.com/mig-7g.80gb"), q("1"));
        assert_eq!(a.gpus_per_unit("nvidia.com/mig-1g.10gb"), q("143m"));
        assert_eq!(a.gpus_per_unit("nvidia.com/mig-4g.24gb"), q("1"));
        assert_eq!(
            a.gpus_per_unit("deviceclass.resource.kubernetes.io/gpu.nvidia.com"),
            q("1")
        );
        assert_eq!(a.gpus_per_unit("cpu"), None);
        assert_eq!(a.gpus_per_unit("memory"), None);
        assert!(a.is_gpu("nvidia.com/gpu") && !a.is_gpu("nvidia.com/mig-1g.10gb"));
    }

    #[test]
    fn a_name_without_a_domain_is_refused_with_its_key() {
        let cfg: AcceleratorsConfig =
            serde_yaml::from_str("resources: {gpu: 1, \"*gpu\": 1, \"acme.io/npu\": 1}").unwrap();
        let errors = Accelerators::compile(&cfg, "accelerators").unwrap_err();
        let keys: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            keys,
            ["accelerators.resources.*gpu", "accelerators.resources.gpu"]
        );
        assert!(errors[0].message.contains("has a domain"), "{errors:?}");
    }
}
