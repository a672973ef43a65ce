//! The Workload view: the one place that knows where pod specs live.
//!
//! A bare Pod *is* its own template (`metadata` + `spec`); a batch/v1 Job has
//! `spec.template`; a Volcano Job has `spec.tasks[*].template`; a PyTorchJob has
//! `spec.pytorchReplicaSpecs.<Type>.template`; a JobSet has
//! `spec.replicatedJobs[*].template.spec.template`. A Trainer v2 TrainJob has **no** pod
//! template (its pods come from the referenced runtime, read by [`runtime`]). Mutators and limit checks ask this module for templates
//! and never match on kinds themselves.

pub mod consumption;
pub mod edit;
pub mod intent;
pub mod runtime;

use crate::json;
use crate::patch::{MapNode, Node, Step};
use serde_json::{Map, Value};
use std::fmt;

pub use crate::kinds::WorkloadKind;
use crate::kinds::{Holders, Naming, Position, field};

/// Where a template sits: what the mutators' walk ([`for_each_template_mut`]) gives.
#[derive(Debug, Clone)]
pub struct TemplateAt {
    /// The kind's position this template is at.
    pub position: &'static Position,
    /// The holder's index in its list ([`Holders::Each`]), else 0.
    pub index: usize,
    /// What binds it to the queue template's holder: the holder's name field (`""` when
    /// absent) or its map key; `None` for a position with one holder.
    pub name: Option<String>,
    /// Where the template is, formatted only when a path is read ([`TemplateAt::path`]).
    place: Place,
}

/// Where a template sits and how many pods it stands for: what the read-only walk
/// ([`templates`]) gives. Derefs to [`TemplateAt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateInfo {
    pub at: TemplateAt,
    /// [`TemplateAt::path`] written out once: the checks read it for every field.
    pub path_text: String,
    /// How many pods run from this template, as written (`replicas`, `parallelism`, a
    /// JobSet's `replicas × parallelism`; 1 for a Pod).
    pub replicas: i64,
    /// The most pods of this template that can run at once (scaling bounds counted; never
    /// below 0).
    pub at_most: i64,
}

impl PartialEq for TemplateAt {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.position, other.position)
            && self.index == other.index
            && self.name == other.name
            && self.place == other.place
    }
}

impl Eq for TemplateAt {}

impl std::ops::Deref for TemplateInfo {
    type Target = TemplateAt;

    fn deref(&self) -> &TemplateAt {
        &self.at
    }
}

/// Where a template is: at its kind's position (the path follows from the position, the
/// holder's index and key), or at a path of its own (a TrainJob's runtime patches).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Position,
    At(String),
}

impl TemplateInfo {
    /// A template at `path`, which its position does not give (a TrainJob's runtime patches):
    /// it stands for no pods of its own.
    pub fn at_path(
        position: &'static Position,
        index: usize,
        name: Option<String>,
        path: String,
    ) -> TemplateInfo {
        TemplateInfo {
            path_text: path.clone(),
            at: TemplateAt {
                position,
                index,
                name,
                place: Place::At(path),
            },
            replicas: 0,
            at_most: 0,
        }
    }

    /// Dotted path of the pod spec, e.g. `spec.template.spec` (`spec` for a Pod), from the
    /// path written once.
    pub fn spec_path_text(&self) -> String {
        spec_path_of(&self.path_text)
    }
}

impl TemplateAt {
    /// Dotted path of the template, e.g. `spec.tasks[1].template` (empty for a Pod).
    pub fn path(&self) -> TemplatePath<'_> {
        TemplatePath(self)
    }

    /// Dotted path of the pod spec, e.g. `spec.template.spec`.
    pub fn spec_path(&self) -> SpecPath<'_> {
        SpecPath(self)
    }

    /// True for the Pod object itself.
    pub fn is_pod(&self) -> bool {
        matches!(self.position.holders, Holders::Root)
    }
}

/// The holders of one position in `object`: (index, map key, holder).
fn holders<'a>(
    position: &Position,
    object: &'a Value,
) -> Vec<(usize, Option<&'a String>, &'a Value)> {
    match position.holders {
        Holders::Root => vec![(0, None, object)],
        Holders::At(at) => field(object, at)
            .map(|h| (0, None, h))
            .into_iter()
            .collect(),
        Holders::Each(at) => field(object, at)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, h)| (i, None, h))
            .collect(),
        Holders::Keyed(at) => field(object, at)
            .and_then(Value::as_object)
            .map(replica_types_in_order)
            .into_iter()
            .flatten()
            .map(|(k, h)| (0, Some(k), h))
            .collect(),
    }
}

/// A template's dotted path, written when displayed: messages name it, the walks do not
/// need it. `to_string()` gives it as a `String`.
#[derive(Clone, Copy)]
pub struct TemplatePath<'a>(&'a TemplateAt);

impl TemplatePath<'_> {
    /// The path as a `String`, built by appending (cheaper than the formatting machinery).
    fn text(&self) -> String {
        let info = self.0;
        let position = info.position;
        if let Place::At(path) = &info.place {
            return path.clone();
        }
        let mut out = position.holders.path().join(".");
        match position.holders {
            Holders::Root | Holders::At(_) => {}
            Holders::Each(_) => {
                out.push('[');
                out.push_str(&info.index.to_string());
                out.push(']');
            }
            Holders::Keyed(_) => {
                out.push('.');
                out.push_str(info.name.as_deref().unwrap_or_default());
            }
        }
        for k in position.template {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(k);
        }
        out
    }
}

impl fmt::Display for TemplatePath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

impl fmt::Debug for TemplatePath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

/// A template's pod spec path (`spec` for a Pod), written when displayed.
#[derive(Clone, Copy)]
pub struct SpecPath<'a>(&'a TemplateAt);

impl fmt::Display for SpecPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&spec_path_of(&self.0.path().text()))
    }
}

/// The pod spec's path under the template at `template_path` (`spec` for a Pod, whose
/// template path is empty).
fn spec_path_of(template_path: &str) -> String {
    if template_path.is_empty() {
        "spec".to_string()
    } else {
        format!("{template_path}.spec")
    }
}

/// The one template walk: every pod template of the workload and where it is, read from the
/// kind's positions, with the holder it is in and the holder's map key. Malformed shapes are
/// skipped, never a panic.
#[allow(clippy::type_complexity)]
fn template_places(
    kind: WorkloadKind,
    object: &Value,
) -> Vec<(TemplateAt, &Value, Option<&String>, &Map<String, Value>)> {
    let mut out = Vec::new();
    for position in kind.spec().positions {
        for (index, key, holder) in holders(position, object) {
            let Some(template) = field(holder, position.template).and_then(Value::as_object) else {
                continue;
            };
            let name = match position.naming {
                Naming::None => None,
                Naming::Field(f) => Some(
                    holder
                        .get(f)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                ),
                Naming::Key => key.cloned(),
            };
            let at = TemplateAt {
                position,
                index,
                name,
                place: Place::Position,
            };
            out.push((at, holder, key, template));
        }
    }
    out
}

/// A PyTorchJob's `pytorchReplicaSpecs` (any [`Holders::Keyed`] map) in the one order
/// launchgate reads them wherever the first template decides (the queue label, the queue
/// env, violation order): byte order of the keys (`Master` before `Worker`). It is the order
/// the API server writes the map in, so it does not depend on how a file lists them; the
/// compiled CEL sorts the keys the same way, as CEL walks a map in no defined order.
pub fn replica_types_in_order(specs: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut out: Vec<(&String, &Value)> = specs.iter().collect();
    out.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out
}

/// The steps from the root to the holder of the template of `info`, and from the holder to
/// the template.
fn template_steps(info: &TemplateAt) -> Option<(Vec<Step<'_>>, Vec<Step<'_>>)> {
    let position = info.position;
    let mut holder: Vec<Step<'_>> = position
        .holders
        .path()
        .iter()
        .map(|k| Step::Key(k))
        .collect();
    match position.holders {
        Holders::Root | Holders::At(_) => {}
        Holders::Each(_) => holder.push(Step::Index(info.index)),
        Holders::Keyed(_) => holder.push(Step::Key(info.name.as_deref()?)),
    }
    let template = position.template.iter().map(|k| Step::Key(k)).collect();
    Some((holder, template))
}

/// Calls `f` for every pod template of the workload with the template object
/// (a map holding `metadata` and `spec`).
pub fn for_each_template_mut(
    kind: WorkloadKind,
    object: &mut Node<'_, Value>,
    mut f: impl FnMut(&TemplateAt, &mut MapNode<'_>),
) {
    // Where each template is, without the pod counts: no mutator reads them.
    let infos: Vec<TemplateAt> = template_places(kind, object)
        .into_iter()
        .map(|(at, ..)| at)
        .collect();
    for info in &infos {
        let Some((holder, template)) = template_steps(info) else {
            continue;
        };
        // Two nodes, so that each path link has room for the steps the mutators add.
        if let Some(mut holder) = object.at_steps(&holder)
            && let Some(mut template) = holder.at_steps(&template)
            && let Some(mut template) = template.as_map_node()
        {
            f(info, &mut template);
        }
    }
}

/// Every pod template of the workload, read-only, with how many pods it stands for.
pub fn templates(kind: WorkloadKind, object: &Value) -> Vec<(TemplateInfo, &Map<String, Value>)> {
    template_places(kind, object)
        .into_iter()
        .map(|(at, holder, key, template)| {
            let position = at.position;
            let key = key.map(String::as_str);
            let info = TemplateInfo {
                path_text: at.path().text(),
                replicas: position.replicas.eval(object, holder, key),
                at_most: position.at_most.eval(object, holder, key).max(0),
                at,
            };
            (info, template)
        })
        .collect()
}

/// The pod templates of `object` and where each is, without their pod counts or written-out
/// paths: for a reader that looks at a template's containers and names a place only when it
/// finds something.
pub fn template_ats(kind: WorkloadKind, object: &Value) -> Vec<(TemplateAt, &Map<String, Value>)> {
    template_places(kind, object)
        .into_iter()
        .map(|(at, _, _, template)| (at, template))
        .collect()
}

/// The container lists of a pod spec that launchgate treats as "containers".
pub const CONTAINER_LISTS: [&str; 2] = ["containers", "initContainers"];

/// What a container is to its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerRole {
    /// An entry of `containers`: a training container.
    App,
    /// An entry of `containers` named in `match.sidecarContainers` (a service-mesh proxy…):
    /// it runs next to the training containers but is never one of them.
    ConfiguredSidecar,
    /// An entry of `initContainers` that runs to completion before the app containers.
    Init,
    /// A native sidecar: an entry of `initContainers` with `restartPolicy: Always`; it keeps
    /// running next to the app containers.
    Sidecar,
}

/// Where one container sits in its pod spec, and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerSlot {
    /// `containers` or `initContainers`.
    pub list: &'static str,
    pub index: usize,
    pub role: ContainerRole,
}

impl ContainerSlot {
    /// Dotted path of the container under `spec_path`, e.g. `spec.template.spec.containers[0]`.
    pub fn path(&self, spec_path: &dyn fmt::Display) -> String {
        format!("{spec_path}.{}[{}]", self.list, self.index)
    }
}

/// A container's display path, e.g. `spec.template.spec.containers[0] (trainer)`, written
/// only when a message displays it.
pub struct ContainerAt<'a> {
    pub spec_path: &'a dyn fmt::Display,
    pub slot: ContainerSlot,
    /// The container's name (empty when it has none).
    pub name: String,
}

impl fmt::Display for ContainerAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.slot.path(self.spec_path), self.name)
    }
}

/// The slots of [`containers`], for a walk that writes.
fn container_slots(pod_spec: &Map<String, Value>, sidecars: &[String]) -> Vec<ContainerSlot> {
    containers(pod_spec, sidecars)
        .map(|(slot, _)| slot)
        .collect()
}

/// What the container `c` of the list `list` is to its pod.
fn role_of(list: &str, c: &Map<String, Value>, sidecars: &[String]) -> ContainerRole {
    if list == CONTAINER_LISTS[0] {
        let name = name_in(c);
        if name.is_some_and(|n| sidecars.iter().any(|s| s == n)) {
            ContainerRole::ConfiguredSidecar
        } else {
            ContainerRole::App
        }
    } else if json::member(c, "restartPolicy").and_then(Value::as_str) == Some("Always") {
        ContainerRole::Sidecar
    } else {
        ContainerRole::Init
    }
}

/// The one container walk: every container entry of a pod spec (`containers`, then
/// `initContainers`, in order) with its slot and role, read-only; entries that are not objects
/// are skipped. `sidecars` are the configured sidecar names (`match.sidecarContainers`).
pub fn containers<'a, 's>(
    pod_spec: &'a Map<String, Value>,
    sidecars: &'s [String],
) -> impl Iterator<Item = (ContainerSlot, &'a Map<String, Value>)> + use<'a, 's> {
    CONTAINER_LISTS.into_iter().flat_map(move |list| {
        let items = json::member(pod_spec, list).and_then(Value::as_array);
        items
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(move |(index, c)| {
                let c = c.as_object()?;
                let role = role_of(list, c, sidecars);
                Some((ContainerSlot { list, index, role }, c))
            })
    })
}

/// Calls `f` for every container of a pod spec with its slot.
pub fn for_each_container_mut(
    pod_spec: &mut MapNode<'_>,
    sidecars: &[String],
    mut f: impl FnMut(ContainerSlot, &mut MapNode<'_>),
) {
    for slot in container_slots(pod_spec, sidecars) {
        if let Some(mut c) = pod_spec.at_steps(&[Step::Key(slot.list), Step::Index(slot.index)])
            && let Some(mut c) = c.as_map_node()
        {
            f(slot, &mut c);
        }
    }
}

/// `template.spec` (the pod spec) as a map, if present.
pub fn pod_spec(template: &Map<String, Value>) -> Option<&Map<String, Value>> {
    json::member(template, "spec").and_then(Value::as_object)
}

/// `template.spec` as a writable map, if present.
pub fn pod_spec_mut<'a>(template: &'a mut MapNode<'_>) -> Option<MapNode<'a>> {
    template.object("spec")
}

/// The `name` of an entry of a named list (containers, env, ports, volumes, volumeMounts).
pub fn name_of(item: &Value) -> Option<&str> {
    name_in(item.as_object()?)
}

/// [`name_of`] for an entry already known to be an object.
pub fn name_in(item: &Map<String, Value>) -> Option<&str> {
    json::member(item, "name")?.as_str()
}

/// The env entry the container will see for `name`.
///
/// The one env reader. When a name appears more than once in `env` (the W&B agent and
/// Volcano's pytorch plugin both append), the kubelet uses the **last** entry, so every
/// "is it set / to what" question is answered from the last entry of that name.
pub fn effective_env<'a>(container: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    json::member(container, "env")?
        .as_array()?
        .iter()
        .rev()
        .find(|e| name_of(e) == Some(name))
}

/// The literal `value` the container will see for `name` (`None` when unset or `valueFrom`).
pub fn effective_env_value<'a>(container: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    json::get(effective_env(container, name)?, "value")?.as_str()
}

/// The `envFrom` source that may give the container the variable `name`, described for a
/// message (`configMapRef "settings"`), when `env` does not set it: a ConfigMap or Secret whose
/// keys are not known here, with no `prefix` or one that `name` starts with. An `env` entry
/// written for `name` would silently override that source's value.
pub fn env_from_source(container: &Map<String, Value>, name: &str) -> Option<String> {
    if effective_env(container, name).is_some() {
        return None;
    }
    json::member(container, "envFrom")?
        .as_array()?
        .iter()
        .filter(|source| {
            let prefix = json::get(source, "prefix")
                .and_then(Value::as_str)
                .unwrap_or("");
            name.starts_with(prefix)
        })
        .find_map(|source| {
            ["configMapRef", "secretRef"].into_iter().find_map(|kind| {
                let r = json::get(source, kind)?;
                let name = json::get(r, "name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Some(format!("{kind} {name:?}"))
            })
        })
}

/// True when `name` appears more than once in the container's `env` (so the earlier entries
/// are shadowed by the last).
pub fn env_is_shadowed(container: &Map<String, Value>, name: &str) -> bool {
    json::member(container, "env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| name_of(e) == Some(name))
        .nth(1)
        .is_some()
}

/// `spec.os.name` is `windows`: no Linux paths, users or security options apply.
pub fn is_windows(pod_spec: &Map<String, Value>) -> bool {
    pod_spec
        .get("os")
        .and_then(|o| o.get("name"))
        .and_then(Value::as_str)
        == Some("windows")
}

/// Labels of an object or template (`metadata.labels`).
pub fn labels(object: &Map<String, Value>) -> Option<&Map<String, Value>> {
    object
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
}

/// Annotations of an object or template (`metadata.annotations`).
pub fn annotations(object: &Map<String, Value>) -> Option<&Map<String, Value>> {
    object
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
}

/// A string value of `metadata.labels[key]` or `metadata.annotations[key]`.
pub fn label<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    labels(object)?.get(key)?.as_str()
}

/// A string value of `metadata.annotations[key]`.
pub fn annotation<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    annotations(object)?.get(key)?.as_str()
}

/// Sets `metadata.annotations[key]` to `value` unless it is that already; true when it
/// changed it.
pub fn set_annotation(object: &mut MapNode<'_>, key: &str, value: &str) -> bool {
    let mut annotations = metadata_map_mut(object, "annotations");
    if annotations.get(key).and_then(Value::as_str) == Some(value) {
        return false;
    }
    annotations.set(key, Value::from(value));
    true
}

/// `metadata.<key>` as a writable map, created when missing (or replaced when not a map).
pub fn metadata_map_mut<'a>(object: &'a mut MapNode<'_>, key: &'a str) -> MapNode<'a> {
    object
        .reborrow()
        .into_object_or_new("metadata")
        .into_object_or_new(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn volcano_tasks_and_pytorch_replicas_are_visited() {
        let mut vc = json!({"spec":{"tasks":[
            {"name":"master","replicas":1,"template":{"spec":{"containers":[]}}},
            {"name":"worker","replicas":2,"template":{"spec":{"containers":[]}}},
            "garbage"
        ]}});
        let mut seen = vec![];
        for_each_template_mut(
            WorkloadKind::VolcanoJob,
            &mut Node::scratch(&mut vc),
            |i, _| seen.push((i.path().to_string(), i.index)),
        );
        let counted: Vec<(String, i64)> = templates(WorkloadKind::VolcanoJob, &vc)
            .into_iter()
            .map(|(i, _)| (i.path().to_string(), i.replicas))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("spec.tasks[0].template".to_string(), 0),
                ("spec.tasks[1].template".to_string(), 1)
            ]
        );
        assert_eq!(
            counted,
            vec![
                ("spec.tasks[0].template".to_string(), 1),
                ("spec.tasks[1].template".to_string(), 2)
            ]
        );
        let pt = json!({"spec":{"pytorchReplicaSpecs":{"Master":{"replicas":1,"template":{}},"Worker":{"replicas":3,"template":{}}}}});
        let t = templates(WorkloadKind::PyTorchJob, &pt);
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].0.replicas, 3);
    }

    #[test]
    fn pytorch_replicas_are_read_in_name_order_whatever_the_document_order() {
        let pt = json!({"spec":{"pytorchReplicaSpecs":{
            "Worker":{"template":{}}, "Master":{"template":{}}, "Launcher":{"template":{}}}}});
        let paths: Vec<String> = templates(WorkloadKind::PyTorchJob, &pt)
            .into_iter()
            .map(|(info, _)| info.path().to_string())
            .collect();
        assert_eq!(
            paths,
            [
                "spec.pytorchReplicaSpecs.Launcher.template",
                "spec.pytorchReplicaSpecs.Master.template",
                "spec.pytorchReplicaSpecs.Worker.template"
            ]
        );
    }

    #[test]
    fn the_container_walk_gives_every_list_with_roles() {
        let spec = json!({"containers": [{"name": "a"}, "junk", {"name": "istio-proxy"}],
            "initContainers": [{"name": "i"}, {"name": "s", "restartPolicy": "Always"}]});
        let sidecars = ["istio-proxy".to_string()];
        let found: Vec<_> = containers(spec.as_object().unwrap(), &sidecars)
            .map(|(slot, c)| (slot.path(&"spec"), slot.role, c["name"].as_str().unwrap()))
            .collect();
        assert_eq!(
            found,
            vec![
                ("spec.containers[0]".into(), ContainerRole::App, "a"),
                (
                    "spec.containers[2]".into(),
                    ContainerRole::ConfiguredSidecar,
                    "istio-proxy"
                ),
                ("spec.initContainers[0]".into(), ContainerRole::Init, "i"),
                ("spec.initContainers[1]".into(), ContainerRole::Sidecar, "s"),
            ]
        );
        assert_eq!(
            containers(json!({"containers": 1}).as_object().unwrap(), &[]).count(),
            0
        );
        // The mutable walk visits the same slots.
        let mut spec = spec;
        let mut seen = vec![];
        for_each_container_mut(
            &mut Node::scratch(spec.as_object_mut().unwrap()),
            &sidecars,
            |slot, c| {
                c.insert("seen".into(), json!(true));
                seen.push(slot);
            },
        );
        let read: Vec<_> = containers(spec.as_object().unwrap(), &sidecars)
            .map(|(slot, c)| {
                assert_eq!(c["seen"], true);
                slot
            })
            .collect();
        assert_eq!(seen, read);
    }

    #[test]
    fn replica_types_are_escaped_in_template_pointers() {
        let mut pt =
            json!({"spec": {"pytorchReplicaSpecs": {"a/b~c": {"template": {"spec": {}}}}}});
        let mut paths = vec![];
        for_each_template_mut(
            WorkloadKind::PyTorchJob,
            &mut Node::scratch(&mut pt),
            |info, t| {
                t.insert("seen".into(), json!(1));
                paths.push(info.path().to_string());
            },
        );
        assert_eq!(paths, ["spec.pytorchReplicaSpecs.a/b~c.template"]);
        assert_eq!(
            pt["spec"]["pytorchReplicaSpecs"]["a/b~c"]["template"]["seen"],
            1
        );
    }

    #[test]
    fn env_reads_follow_the_last_entry() {
        let c = json!({"env": [
            {"name": "A", "value": "first"},
            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
            {"name": "A", "value": "last"}
        ]});
        let c = c.as_object().unwrap();
        assert_eq!(effective_env_value(c, "A"), Some("last"));
        assert!(env_is_shadowed(c, "A"));
        assert!(!env_is_shadowed(c, "B"));
        assert_eq!(effective_env_value(c, "B"), None);
        assert!(effective_env(c, "B").is_some());
        assert!(effective_env(c, "C").is_none());
        let garbage = json!({"env": "x"});
        assert!(effective_env(garbage.as_object().unwrap(), "A").is_none());
    }

    #[test]
    fn env_from_may_give_a_variable_unless_env_or_the_prefix_says_otherwise() {
        let c = json!({"envFrom": [{"prefix": "APP_", "secretRef": {"name": "s"}},
                                   {"configMapRef": {"name": "settings"}}],
                       "env": [{"name": "HF_HOME", "value": "/x"}]});
        let c = c.as_object().unwrap();
        assert_eq!(
            env_from_source(c, "TORCH_HOME").as_deref(),
            Some(r#"configMapRef "settings""#)
        );
        // Set in env: env wins over envFrom.
        assert_eq!(env_from_source(c, "HF_HOME"), None);
        let prefixed = json!({"envFrom": [{"prefix": "APP_", "secretRef": {"name": "s"}}]});
        let prefixed = prefixed.as_object().unwrap();
        assert_eq!(env_from_source(prefixed, "MASTER_ADDR"), None);
        assert_eq!(
            env_from_source(prefixed, "APP_MODE").as_deref(),
            Some(r#"secretRef "s""#)
        );
        assert_eq!(env_from_source(json!({}).as_object().unwrap(), "X"), None);
    }

    #[test]
    fn malformed_shapes_are_skipped() {
        for kind in [
            WorkloadKind::Pod,
            WorkloadKind::BatchJob,
            WorkloadKind::VolcanoJob,
            WorkloadKind::PyTorchJob,
        ] {
            for mut v in [
                json!(null),
                json!([]),
                json!({"spec": 3}),
                json!({"spec":{"tasks":{}}}),
            ] {
                for_each_template_mut(kind, &mut Node::scratch(&mut v), |_, _| {});
                let _ = templates(kind, &v);
            }
        }
    }
}
