//! Where the template's positions land in a workload: by role and name, not by list position.
//!
//! * **Pod templates.** A template with one pod template (a batch/v1 Job template) applies it
//!   to every pod template of the workload, whatever its kind. A template with several (Volcano
//!   tasks, PyTorchJob replica types) applies each to the workload's pod template of the same
//!   role: the Volcano task of the same name, the PyTorchJob replica of the same type
//!   (case-insensitive), and for a controller-made Pod the task or replica type it carries
//!   (`volcano.sh/task-spec`, `training.kubeflow.org/replica-type`). An unnamed template task
//!   applies everywhere.
//! * **Containers.** A template container with a `name` is the workload's container of that
//!   name. One without a name is found by position among the app containers that are not
//!   sidecars (`match.sidecarContainers`): the template's first container is "the training
//!   container", wherever an injected sidecar put it. Init containers without a name go by
//!   position.
//! * **The envelope.** Pod templates, tasks and containers the template does not describe —
//!   a second app container, init containers, native sidecars, an extra Volcano task — are
//!   not free: every container is held to the largest maximum the queue gives any container
//!   for the same resource (`resources.limits.<r>` / `resources.requests.<r>`, from template
//!   variables and pod-relative `fields`). A resource some position leaves unbounded has no
//!   envelope.

use super::path::{self, FieldPath, Segment};
use super::schema::Schema;
use super::template::{Anchor, LeafContent, Piece, TemplateLeaf};
use super::{FieldLimit, VariableLimit};
use crate::kinds::{From as KindFrom, Holders, Naming, Num, Position, RoleMark};
use crate::quantity::Quantity;
use crate::rules::{self, Rule, Violation};
use crate::workload::{self, CONTAINER_LISTS, ContainerRole, TemplateInfo, WorkloadKind};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};

/// One pod template of the queue template.
#[derive(Debug, Clone, Default)]
struct PodTemplateShape {
    /// Where it is in the template, e.g. `spec.tasks[1].template`.
    path: FieldPath,
    /// The template kind's position it is at.
    position: Option<&'static Position>,
    /// Its role: its holder's name (a Volcano task's, a Ray worker group's) or map key (a
    /// PyTorchJob replica type).
    role: Option<String>,
    /// Container names by (list, index).
    names: HashMap<(&'static str, usize), String>,
}

/// The pod templates of the queue template, with their roles and container names.
#[derive(Debug, Clone, Default)]
pub(super) struct TemplateShape {
    pod_templates: Vec<PodTemplateShape>,
    /// Per list of holders named by a field (a Volcano template's `spec.tasks`, a JobSet
    /// template's `spec.replicatedJobs`): the names by their position in the list.
    list_names: BTreeMap<&'static [&'static str], BTreeMap<usize, String>>,
    /// Per map of holders named by their key (a PyTorchJob template's
    /// `spec.pytorchReplicaSpecs`): the keys the template describes.
    map_keys: BTreeMap<&'static [&'static str], Vec<String>>,
}

/// The role of a pod template of the workload: its holder's name or map key, or for a Pod
/// (or the single pod template of a child workload, an MPIJob's launcher Job) the holder it
/// carries, as the controller of any kind marks its pods
/// ([`crate::kinds::KindSpec::role_marks`]).
fn role_of(info: &TemplateInfo, template: &Map<String, Value>) -> Option<String> {
    let role = match &info.name {
        Some(name) => Some(name.clone()),
        None => WorkloadKind::all()
            .flat_map(|k| k.spec().role_marks.iter())
            .find_map(|mark| match mark {
                RoleMark::Label(key) => workload::label(template, key),
                RoleMark::Annotation(key) => workload::annotation(template, key),
            })
            .map(str::to_string),
    };
    role.filter(|r| !r.is_empty())
}

/// True when `segments` are exactly the keys of `path`.
fn is_keys(segments: &[Segment], path: &[&str]) -> bool {
    segments.len() == path.len()
        && segments
            .iter()
            .zip(path)
            .all(|(s, k)| matches!(s, Segment::Key(x) if x == k))
}

/// What follows `path` at the start of `segments`, when they start with its keys.
fn after_keys<'s>(segments: &'s [Segment], path: &[&str]) -> Option<&'s [Segment]> {
    (segments.len() >= path.len() && is_keys(&segments[..path.len()], path))
        .then(|| &segments[path.len()..])
}

/// The position of `kind` a pod template of the queue template at `prefix` is at, and its
/// role there: the holder's naming field (read from the template's literal leaves) or map
/// key. Matched from the end of `prefix`, so it does not depend on where the template text
/// put the workload.
fn template_role(
    kind: Option<WorkloadKind>,
    prefix: &[Segment],
    leaves: &[TemplateLeaf],
) -> (Option<&'static Position>, Option<String>) {
    let Some(kind) = kind else {
        return (None, None);
    };
    for position in kind.spec().positions {
        let Some(cut) = prefix.len().checked_sub(position.template.len()) else {
            continue;
        };
        if !is_keys(&prefix[cut..], position.template) {
            continue;
        }
        let holder = &prefix[..cut];
        let list = position.holders.path();
        let role = match position.holders {
            Holders::Root => Some(None),
            Holders::At(at) => {
                let n = holder.len();
                (n >= at.len() && is_keys(&holder[n - at.len()..], at)).then_some(None)
            }
            Holders::Each(_) | Holders::Keyed(_) => {
                let Some((selector, parent)) = holder.split_last() else {
                    continue;
                };
                let n = parent.len();
                if n < list.len() || !is_keys(&parent[n - list.len()..], list) {
                    continue;
                }
                match (position.naming, selector) {
                    (Naming::Field(f), Segment::Index(_)) => {
                        let mut name_at = holder.to_vec();
                        name_at.push(Segment::Key(f.to_string()));
                        Some(leaves.iter().find_map(|l| match &l.content {
                            LeafContent::Literal(Value::String(name))
                                if l.template_path.0 == name_at =>
                            {
                                Some(name.clone())
                            }
                            _ => None,
                        }))
                    }
                    (Naming::Key, Segment::Key(key)) => Some(Some(key.clone())),
                    (Naming::None, Segment::Index(_))
                        if matches!(position.holders, Holders::Each(_)) =>
                    {
                        Some(None)
                    }
                    _ => None,
                }
            }
        };
        if let Some(role) = role {
            return (Some(position), role.filter(|r| !r.is_empty()));
        }
    }
    (None, None)
}

/// The field a position's pods are counted by (the first holder field its `replicas` reads:
/// `replicas` of a task, a replica type, a worker group).
fn count_field(num: &Num) -> Option<&'static [&'static str]> {
    match num {
        Num::Int {
            from: KindFrom::Holder,
            at,
            ..
        } => Some(at),
        Num::Int { .. } | Num::Lit(_) | Num::Scaled { .. } => None,
        Num::Min(a, b) | Num::Max(a, b) | Num::Mul(a, b) | Num::Add(a, b) | Num::Sub(a, b) => {
            count_field(a).or_else(|| count_field(b))
        }
        Num::If {
            then, otherwise, ..
        } => count_field(then).or_else(|| count_field(otherwise)),
    }
}

/// The fields `num` reads for a holder, conditions decided; a field only under a `Min` can
/// never raise the count, so it is left out, and so is an int-or-percent amount.
fn raising_fields(
    num: &Num,
    object: &Value,
    holder: &Value,
    key: Option<&str>,
    out: &mut Vec<(KindFrom, &'static [&'static str])>,
) {
    match num {
        Num::Lit(_) | Num::Min(..) => {}
        Num::Int { from, at, .. } => out.push((*from, at)),
        // An int-or-percent amount (a surge) is relative to a count, never a count of its own,
        // so no limit on a count is compared with it; the totals count what it adds.
        Num::Scaled { of, .. } => raising_fields(of, object, holder, key, out),
        Num::Max(a, b) | Num::Mul(a, b) | Num::Add(a, b) => {
            raising_fields(a, object, holder, key, out);
            raising_fields(b, object, holder, key, out);
        }
        // What is taken away never raises the count.
        Num::Sub(a, _) => raising_fields(a, object, holder, key, out),
        Num::If {
            when,
            then,
            otherwise,
        } => {
            let branch = if when.holds(object, holder, key) {
                then
            } else {
                otherwise
            };
            raising_fields(branch, object, holder, key, out);
        }
    }
}

/// The scaling bounds of a position for a holder: the fields its upper bound (`at_most`)
/// reads that its count (`replicas`) does not (an elastic PyTorchJob's
/// `spec.elasticPolicy.maxReplicas`, an autoscaling Ray worker group's `maxReplicas`). A
/// limit on the count holds them too: they let more pods run than the count says.
fn scaling_bounds(
    position: &Position,
    object: &Value,
    holder: &Value,
    key: Option<&str>,
) -> Vec<(KindFrom, &'static [&'static str])> {
    let mut counted = Vec::new();
    raising_fields(&position.replicas, object, holder, key, &mut counted);
    let mut bounds = Vec::new();
    raising_fields(&position.at_most, object, holder, key, &mut bounds);
    bounds.retain(|f| !counted.contains(f));
    bounds.dedup();
    bounds
}

/// The written path `base` followed by the keys of `path`.
fn dotted(base: &str, path: &[&str]) -> String {
    let mut out = base.to_string();
    for k in path {
        path::push_segment(&mut out, &Segment::Key(k.to_string()));
    }
    out
}

/// `spec.<list>[i]` at the start of a pod-template-relative path: (list, i, the rest).
pub(super) fn container_of(path: &FieldPath) -> Option<(&'static str, usize, &[Segment])> {
    match path.0.as_slice() {
        [
            Segment::Key(spec),
            Segment::Key(list),
            Segment::Index(i),
            rest @ ..,
        ] if spec == "spec" => {
            let list = CONTAINER_LISTS.into_iter().find(|l| l == list)?;
            Some((list, *i, rest))
        }
        _ => None,
    }
}

static ABSENT: Value = Value::Null;

impl TemplateShape {
    /// The shape of a parsed template of `kind`: its pod templates (where its pod-template
    /// positions are), their roles and their containers' names, and the names and keys of its
    /// holders.
    pub(super) fn of(kind: Option<WorkloadKind>, leaves: &[TemplateLeaf]) -> TemplateShape {
        let mut pod_templates: Vec<PodTemplateShape> = Vec::new();
        for leaf in leaves.iter().filter(|l| l.anchor == Anchor::PodTemplate) {
            let Some(cut) = leaf.template_path.0.len().checked_sub(leaf.path.0.len()) else {
                continue;
            };
            let prefix = &leaf.template_path.0[..cut];
            let at = match pod_templates.iter().position(|t| t.path.0 == prefix) {
                Some(at) => at,
                None => {
                    let (position, role) = template_role(kind, prefix, leaves);
                    pod_templates.push(PodTemplateShape {
                        path: FieldPath(prefix.to_vec()),
                        position,
                        role,
                        names: HashMap::new(),
                    });
                    pod_templates.len() - 1
                }
            };
            if let Some((list, index, [Segment::Key(key)])) = container_of(&leaf.path)
                && key == "name"
                && let LeafContent::Literal(Value::String(name)) = &leaf.content
            {
                pod_templates[at].names.insert((list, index), name.clone());
            }
        }
        let positions = kind.map(|k| k.spec().positions).unwrap_or_default();
        let mut list_names: BTreeMap<&'static [&'static str], BTreeMap<usize, String>> =
            BTreeMap::new();
        let mut map_keys: BTreeMap<&'static [&'static str], Vec<String>> = BTreeMap::new();
        for leaf in leaves.iter().filter(|l| l.anchor == Anchor::Root) {
            for position in positions {
                match (position.holders, position.naming) {
                    (Holders::Each(list), Naming::Field(f)) => {
                        if let Some([Segment::Index(i), Segment::Key(name)]) =
                            after_keys(&leaf.path.0, list)
                            && name == f
                            && let LeafContent::Literal(Value::String(n)) = &leaf.content
                        {
                            list_names.entry(list).or_default().insert(*i, n.clone());
                        }
                    }
                    (Holders::Keyed(map), Naming::Key) => {
                        if let Some([Segment::Key(t), _, ..]) = after_keys(&leaf.path.0, map) {
                            let described = map_keys.entry(map).or_default();
                            if !described.iter().any(|r| r.eq_ignore_ascii_case(t)) {
                                described.push(t.clone());
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        for t in &pod_templates {
            if let Some(position) = t.position
                && let (Holders::Keyed(map), Naming::Key) = (position.holders, position.naming)
                && let Some(role) = &t.role
            {
                let described = map_keys.entry(map).or_default();
                if !described.iter().any(|r| r.eq_ignore_ascii_case(role)) {
                    described.push(role.clone());
                }
            }
        }
        TemplateShape {
            pod_templates,
            list_names,
            map_keys,
        }
    }

    /// Every place of the workload (of `kind`) that the root-anchored template position `path`
    /// designates, with its value (`None` when absent), bound to what runs rather than to a
    /// list position:
    ///
    /// * a position under an entry of a list of holders named by a field (a Volcano task's
    ///   `spec.tasks[i].replicas`, a JobSet replicated job's, a Ray worker group's by its
    ///   `groupName`) is the workload's holder of the same name, wherever it is in the list;
    ///   a holder the template does not name (an extra task) is held to every holder's
    ///   positions, so it cannot escape them;
    /// * a position under an entry of a map of holders (a PyTorchJob replica type) is the
    ///   workload's holder of the same key compared case-insensitively (the training operator
    ///   normalises `worker` to `Worker`), and a key the template does not name is held to
    ///   every key's positions;
    /// * a limit on a holder's count also reaches the scaling bounds its kind counts above
    ///   it (the Worker replicas of an elastic PyTorchJob reach
    ///   `spec.elasticPolicy.maxReplicas`; an autoscaling Ray worker group's `replicas` its
    ///   `maxReplicas`).
    pub(super) fn root_places<'a>(
        &self,
        kind: WorkloadKind,
        object: &'a Value,
        path: &FieldPath,
    ) -> Vec<(String, Option<&'a Value>)> {
        for position in kind.spec().positions {
            let holders = position.holders.path();
            let Some(after) = after_keys(&path.0, holders) else {
                continue;
            };
            match (position.holders, position.naming, after) {
                (Holders::Each(list), Naming::Field(f), [Segment::Index(i), rest @ ..]) => {
                    return self.list_places(position, list, f, *i, object, rest);
                }
                (Holders::Keyed(map), Naming::Key, [Segment::Key(want), rest @ ..]) => {
                    return self.map_places(position, map, want, object, rest);
                }
                _ => {}
            }
        }
        path::resolve(object, "", &path.0)
    }

    /// [`Self::root_places`] under the entry `i` of the template's list of holders `list`,
    /// named by their field `f`.
    fn list_places<'a>(
        &self,
        position: &Position,
        list: &'static [&'static str],
        f: &str,
        i: usize,
        object: &'a Value,
        rest: &[Segment],
    ) -> Vec<(String, Option<&'a Value>)> {
        let names = self.list_names.get(list);
        let want = names.and_then(|n| n.get(&i)).map(String::as_str);
        let items = crate::kinds::field(object, list)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let name_of = |h: &'a Value| h.get(f).and_then(Value::as_str);
        let named =
            |n: Option<&str>| n.is_some_and(|n| names.is_some_and(|t| t.values().any(|t| t == n)));
        // The holder's name is what binds it: an extra holder is not held to another's.
        let is_name = matches!(rest, [Segment::Key(k)] if k == f);
        let counts = count_field(&position.replicas).is_some_and(|c| is_keys(rest, c));
        let base = dotted("", list);
        let mut out = Vec::new();
        let mut bounds = Vec::new();
        for (j, holder) in items.iter().enumerate() {
            let name = name_of(holder);
            if want.is_none() || name == want || (!named(name) && !is_name) {
                let at = format!("{base}[{j}]");
                out.extend(path::resolve(holder, &at, rest));
                if counts {
                    self.bounds_of(position, object, holder, None, &at, &mut bounds);
                }
            }
        }
        if let Some(want) = want
            && !items.iter().any(|h| name_of(h) == Some(want))
        {
            out.extend(path::resolve(&ABSENT, &format!("{base}[{f}={want}]"), rest));
        }
        out.extend(bounds);
        out
    }

    /// [`Self::root_places`] under the key `want` of the template's map of holders `map`.
    fn map_places<'a>(
        &self,
        position: &Position,
        map: &'static [&'static str],
        want: &str,
        object: &'a Value,
        rest: &[Segment],
    ) -> Vec<(String, Option<&'a Value>)> {
        let holders = crate::kinds::field(object, map).and_then(Value::as_object);
        let described = self
            .map_keys
            .get(map)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let base = dotted("", map);
        let mut out = Vec::new();
        let mut found = None;
        for (t, holder) in holders.into_iter().flatten() {
            let same = t.eq_ignore_ascii_case(want);
            if same && found.is_none() {
                found = Some(holder);
            }
            if same || !described.iter().any(|r| r.eq_ignore_ascii_case(t)) {
                out.extend(path::resolve(holder, &dotted(&base, &[t]), rest));
            }
        }
        let at = dotted(&base, &[want]);
        if found.is_none() {
            out.extend(path::resolve(&ABSENT, &at, rest));
        }
        if count_field(&position.replicas).is_some_and(|c| is_keys(rest, c)) {
            let holder = found.unwrap_or(&ABSENT);
            self.bounds_of(position, object, holder, Some(want), &at, &mut out);
        }
        out
    }

    /// The scaling bounds of `position` for `holder` (at `at`) that are set, as places.
    fn bounds_of<'a>(
        &self,
        position: &Position,
        object: &'a Value,
        holder: &'a Value,
        key: Option<&str>,
        at: &str,
        out: &mut Vec<(String, Option<&'a Value>)>,
    ) {
        for (from, field) in scaling_bounds(position, object, holder, key) {
            let (base, written) = match from {
                KindFrom::Holder => (holder, dotted(at, field)),
                KindFrom::Object => (object, dotted("", field)),
            };
            if let Some(value) = crate::kinds::field(base, field).filter(|v| !v.is_null())
                && !out.iter().any(|(p, _)| *p == written)
            {
                out.push((written, Some(value)));
            }
        }
    }

    /// What binds the template position `template_path` (`path` relative to its pod
    /// template): the role its pod template stands for when the template has several (else it
    /// applies to every pod template), and the name of the template container `(list, index)`.
    pub(super) fn binding_of(
        &self,
        template_path: &FieldPath,
        path: &FieldPath,
        container: Option<(&'static str, usize)>,
    ) -> (Option<&str>, Option<&str>) {
        let source = self.source(template_path, path);
        let name = container.and_then(|key| source?.names.get(&key));
        (self.role(source), name.map(String::as_str))
    }

    /// The template's pod template the position `template_path` (`path` relative to its pod
    /// template) is in.
    fn source(&self, template_path: &FieldPath, path: &FieldPath) -> Option<&PodTemplateShape> {
        let prefix = &template_path.0[..template_path.0.len().saturating_sub(path.0.len())];
        self.pod_templates.iter().find(|t| t.path.0 == prefix)
    }

    /// The role the template's pod template `source` binds by: its role when the template has
    /// several pod templates (one applies to every pod template).
    fn role<'s>(&self, source: Option<&'s PodTemplateShape>) -> Option<&'s str> {
        source
            .and_then(|s| s.role.as_deref())
            .filter(|_| self.pod_templates.len() > 1)
    }

    /// Which pod templates of a workload the template position `template_path` (`path`
    /// relative to its pod template) applies to, in words: `every pod template`, or
    /// `the Worker pod template` when the template has several and this one has a role.
    pub(super) fn pod_templates_of(&self, template_path: &FieldPath, path: &FieldPath) -> String {
        match self.role(self.source(template_path, path)) {
            Some(role) => format!("the {role} pod template"),
            None => "every pod template".into(),
        }
    }

    /// Every place of the workload that the template position `template_path` (`path`
    /// relative to its pod template) designates, with its value (`None` when absent).
    pub(super) fn places<'a>(
        &self,
        templates: &[(TemplateInfo, &'a Map<String, Value>)],
        sidecars: &[String],
        template_path: &FieldPath,
        path: &FieldPath,
    ) -> Vec<(String, Option<&'a Value>)> {
        let source = self.source(template_path, path);
        let role = self.role(source);
        let mut out = Vec::new();
        for (info, template) in templates {
            // Only the workload's pod templates of the role, when the position has one.
            if let Some(want) = role
                && !role_of(info, template).is_some_and(|r| r.eq_ignore_ascii_case(want))
            {
                continue;
            }
            let Some((list, index, rest)) = container_of(path) else {
                out.extend(path::resolve_in_map(template, &info.path_text, &path.0));
                continue;
            };
            let name = source.and_then(|s| s.names.get(&(list, index)));
            let items = template
                .get("spec")
                .and_then(|s| s.get(list))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let found = match name {
                Some(name) => items
                    .iter()
                    .position(|c| workload::name_of(c) == Some(name.as_str())),
                None if list == CONTAINER_LISTS[0] => template
                    .get("spec")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flat_map(|spec| workload::containers(spec, sidecars))
                    .filter(|(slot, _)| slot.role == ContainerRole::App)
                    .nth(index)
                    .map(|(slot, _)| slot.index),
                None => (index < items.len()).then_some(index),
            };
            let (item, step) = match (found, name) {
                (Some(j), _) => (&items[j], format!("[{j}]")),
                (None, Some(name)) => (&ABSENT, format!("[name={name}]")),
                (None, None) => (&ABSENT, format!("[{index}]")),
            };
            let base = dotted(&info.spec_path_text(), &[list]) + &step;
            out.extend(path::resolve(item, &base, rest));
        }
        out
    }
}

/// The envelope on one resource: no container may have more.
#[derive(Debug, Clone)]
pub(super) struct Ceiling {
    /// `limits` or `requests`.
    pub kind: String,
    pub resource: String,
    /// The maximum, and a quantity schema holding only it.
    pub value: Quantity,
    pub schema: Schema,
    /// The limit it comes from, e.g. `variable "gpus"`.
    pub source: Source,
}

/// The resource a limit position bounds per container, as (limits|requests, resource): in a
/// pod template `spec.<list>[i or *].resources.<limits|requests>.<resource>`, or at the root
/// of a kind run from a runtime, its settings' resources of each node
/// (`<settings>.<resources>.<limits|requests>.<resource>`, which the runtime's controller gives
/// the node container of every node, so a container position too).
fn container_resource_of(anchor: Anchor, path: &FieldPath) -> Option<(String, String)> {
    let (kind, resource) = match (anchor, path.0.as_slice()) {
        (
            Anchor::PodTemplate,
            [
                Segment::Key(spec),
                Segment::Key(list),
                Segment::Index(_) | Segment::AnyIndex,
                Segment::Key(resources),
                Segment::Key(kind),
                Segment::Key(resource),
            ],
        ) if spec == "spec"
            && CONTAINER_LISTS.contains(&list.as_str())
            && resources == "resources" =>
        {
            (kind, resource)
        }
        (
            Anchor::Root,
            [
                Segment::Key(spec),
                Segment::Key(settings),
                Segment::Key(per_node),
                Segment::Key(kind),
                Segment::Key(resource),
            ],
        ) if WorkloadKind::all()
            .filter_map(|k| k.spec().runtime)
            .any(|rt| {
                rt.settings == [spec.as_str(), settings.as_str()]
                    && rt.resources == per_node.as_str()
            }) =>
        {
            (kind, resource)
        }
        _ => return None,
    };
    (kind == "limits" || kind == "requests").then(|| (kind.clone(), resource.clone()))
}

/// The envelope of a queue: per resource, the largest maximum any container position has.
pub(super) fn envelope(variables: &[VariableLimit], fields: &[FieldLimit]) -> Vec<Ceiling> {
    // None: some position leaves the resource unbounded.
    let mut tops: BTreeMap<(String, String), Option<Ceiling>> = BTreeMap::new();
    let mut add = |(kind, resource): (String, String), schema: &Schema, source: Source| {
        let key = (kind.clone(), resource.clone());
        let offer = schema.ceiling().map(|(value, schema)| Ceiling {
            kind,
            resource,
            value,
            schema,
            source,
        });
        match (tops.get(&key), offer) {
            (Some(None), _) => {}
            (Some(Some(top)), Some(offer)) if top.value >= offer.value => {}
            (_, offer) => {
                tops.insert(key, offer);
            }
        }
    };
    for variable in variables {
        for location in &variable.locations {
            let whole = matches!(location.pattern.as_slice(), [Piece::Variable(_)]);
            if whole && let Some(key) = container_resource_of(location.anchor, &location.path) {
                add(key, &variable.schema, Source::variable(&variable.name));
            }
        }
    }
    for field in fields {
        if let Some(key) = container_resource_of(field.anchor, &field.path) {
            add(key, &field.schema, Source::field(&field.written));
        }
    }
    tops.into_values().flatten().collect()
}

/// The limit a variable or field position comes from: its rule, its key in the config and how
/// messages name it (`variable "gpus"`).
#[derive(Debug, Clone)]
pub(super) struct Source {
    pub rule: &'static Rule,
    pub key: String,
    pub text: String,
}

impl Source {
    pub(super) fn variable(name: &str) -> Self {
        Source {
            rule: rules::LIMITS_VARIABLES,
            key: name.to_string(),
            text: format!("variable {name:?}"),
        }
    }

    pub(super) fn field(written: &str) -> Self {
        Source {
            rule: rules::LIMITS_FIELDS,
            key: written.to_string(),
            text: format!("field {written:?}"),
        }
    }

    /// A violation of this source's rule, keyed by its config entry.
    pub(super) fn violation(&self, text: String) -> Violation {
        Violation::new(self.rule, text).key(self.key.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::template;
    use serde_json::json;

    fn shape(text: &str) -> TemplateShape {
        let t = template::parse(&json!(text)).unwrap();
        TemplateShape::of(Some(t.kind), &t.leaves)
    }

    /// The written places of the template position at `template_path` in `object`.
    fn places_of(
        shape: &TemplateShape,
        kind: WorkloadKind,
        object: &Value,
        at: &str,
    ) -> Vec<String> {
        let template_path = FieldPath::parse(at).unwrap();
        let start = shape
            .pod_templates
            .iter()
            .find(|t| template_path.starts_with(&t.path))
            .map_or(0, |t| t.path.0.len());
        let path = FieldPath(template_path.0[start..].to_vec());
        let templates = workload::templates(kind, object);
        let sidecars = vec!["istio-proxy".to_string()];
        shape
            .places(&templates, &sidecars, &template_path, &path)
            .into_iter()
            .map(|(p, v)| format!("{p}={}", v.map_or("-".into(), Value::to_string)))
            .collect()
    }

    #[test]
    fn unnamed_template_container_is_the_training_container() {
        let s = shape(
            "spec: {template: {spec: {containers: [{resources: {limits: {cpu: '{{cpu}}'}}}]}}}",
        );
        let job = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "istio-proxy", "resources": {"limits": {"cpu": "2"}}},
            {"name": "train", "resources": {"limits": {"cpu": "8"}}}]}}}});
        assert_eq!(
            places_of(
                &s,
                WorkloadKind::BatchJob,
                &job,
                "spec.template.spec.containers[0].resources.limits.cpu"
            ),
            vec![r#"spec.template.spec.containers[1].resources.limits.cpu="8""#]
        );
    }

    #[test]
    fn named_template_container_binds_by_name() {
        let s = shape(
            "spec: {template: {spec: {containers: [{name: log}, {name: train, resources: {limits: {cpu: '{{cpu}}'}}}]}}}",
        );
        let job = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "train", "resources": {"limits": {"cpu": "8"}}}, {"name": "log"}]}}}});
        let at = "spec.template.spec.containers[1].resources.limits.cpu";
        assert_eq!(
            places_of(&s, WorkloadKind::BatchJob, &job, at),
            vec![r#"spec.template.spec.containers[0].resources.limits.cpu="8""#]
        );
        let renamed = json!({"spec": {"template": {"spec": {"containers": [{"name": "x"}]}}}});
        assert_eq!(
            places_of(&s, WorkloadKind::BatchJob, &renamed, at),
            vec!["spec.template.spec.containers[name=train].resources.limits.cpu=-"]
        );
    }

    #[test]
    fn volcano_tasks_bind_by_name_and_pods_by_their_task() {
        let s = shape(
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nspec:\n  tasks:\n  - name: master\n    template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: '{{m}}'}}}]}}\n  - name: worker\n    template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: '{{w}}'}}}]}}\n",
        );
        let task = |name: &str, gpus: i64| {
            json!({"name": name, "template": {"spec": {"containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}})
        };
        // Listed in the other order than in the template.
        let vc =
            json!({"spec": {"tasks": [task("worker", 4), task("master", 0), task("extra", 8)]}});
        let worker_at =
            r#"spec.tasks[1].template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#;
        assert_eq!(
            places_of(&s, WorkloadKind::VolcanoJob, &vc, worker_at),
            vec![
                r#"spec.tasks[0].template.spec.containers[0].resources.limits["nvidia.com/gpu"]=4"#
            ]
        );
        let pod = json!({"metadata": {"annotations": {"volcano.sh/task-spec": "master"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}});
        assert!(places_of(&s, WorkloadKind::Pod, &pod, worker_at).is_empty());
        let master_at = worker_at.replace("tasks[1]", "tasks[0]");
        assert_eq!(
            places_of(&s, WorkloadKind::Pod, &pod, &master_at),
            vec![r#"spec.containers[0].resources.limits["nvidia.com/gpu"]=1"#]
        );
    }

    #[test]
    fn envelope_is_the_largest_maximum_per_resource_and_none_when_unbounded() {
        let limits = |yaml: &str| {
            let cfg: crate::validate::LimitsConfig = serde_yaml::from_str(yaml).unwrap();
            crate::validate::QueueLimits::compile(&cfg, "q", &Default::default()).unwrap()
        };
        let compiled = limits(
            r#"
template: "spec: {template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: '{{a}}', cpu: '{{c}}'}}}, {resources: {limits: {nvidia.com/gpu: '{{b}}'}}}]}}}"
variables:
  a: {type: integer, maximum: 2}
  b: {type: integer, enum: [1, 8]}
  c: {type: quantity, minimum: 1}
fields:
  - {path: "initContainers[*].resources.requests.memory", type: quantity, maximum: 1Gi}
  - {path: "containers[0].image", type: string}
"#,
        );
        let found: Vec<(String, String, String)> = compiled
            .envelope
            .iter()
            .map(|c| {
                let shown = c
                    .schema
                    .problem(&json!("1e12"))
                    .map(String::from)
                    .unwrap_or_default();
                (
                    format!("{}.{}", c.kind, c.resource),
                    shown,
                    c.source.text.clone(),
                )
            })
            .collect();
        assert_eq!(
            found,
            vec![
                (
                    "limits.nvidia.com/gpu".to_string(),
                    "exceeds maximum 8".to_string(),
                    r#"variable "b""#.to_string()
                ),
                (
                    "requests.memory".to_string(),
                    "exceeds maximum 1Gi".to_string(),
                    r#"field "initContainers[*].resources.requests.memory""#.to_string()
                ),
            ],
            "cpu has no maximum, so no envelope"
        );
    }

    #[test]
    fn roles_and_names_are_read_wherever_the_template_puts_the_workload() {
        // E.g. a queue config that nests the workload under `resource_args.kubernetes`.
        let leaf = |anchor, at: &str, rel: &str, value: Value| TemplateLeaf {
            anchor,
            path: FieldPath::parse(rel).unwrap(),
            template_path: FieldPath::parse(at).unwrap(),
            content: LeafContent::Literal(value),
            under_macro_key: false,
        };
        let wrap = "resource_args.kubernetes.spec.tasks[3]";
        let leaves = vec![
            leaf(
                Anchor::Root,
                &format!("{wrap}.name"),
                &format!("{wrap}.name"),
                json!("worker"),
            ),
            leaf(
                Anchor::PodTemplate,
                &format!("{wrap}.template.spec.containers[0].name"),
                "spec.containers[0].name",
                json!("train"),
            ),
        ];
        let s = TemplateShape::of(Some(WorkloadKind::VolcanoJob), &leaves);
        assert_eq!(s.pod_templates.len(), 1);
        assert_eq!(s.pod_templates[0].role.as_deref(), Some("worker"));
        assert_eq!(
            s.pod_templates[0]
                .names
                .get(&("containers", 0))
                .map(String::as_str),
            Some("train")
        );
        let pt = TemplateShape::of(
            Some(WorkloadKind::PyTorchJob),
            &[leaf(
                Anchor::PodTemplate,
                "kubernetes.spec.pytorchReplicaSpecs.Worker.template.spec.restartPolicy",
                "spec.restartPolicy",
                json!("OnFailure"),
            )],
        );
        assert_eq!(pt.pod_templates[0].role.as_deref(), Some("Worker"));
    }

    #[test]
    fn a_wrapped_jobsets_replicated_jobs_bind_by_name() {
        let t = template::parse(&json!(
            "kubernetes:\n  apiVersion: jobset.x-k8s.io/v1alpha2\n  kind: JobSet\n  spec:\n    replicatedJobs:\n    - name: leader\n      template: {spec: {template: {spec: {containers: [{name: c, resources: {limits: {cpu: '{{l}}'}}}]}}}}\n    - name: workers\n      template: {spec: {template: {spec: {containers: [{name: c, resources: {limits: {cpu: '{{w}}'}}}]}}}}\n"
        ))
        .unwrap();
        let s = TemplateShape::of(Some(t.kind), &t.leaves);
        let roles: Vec<_> = s.pod_templates.iter().map(|p| p.role.as_deref()).collect();
        assert_eq!(roles, vec![Some("leader"), Some("workers")]);
    }

    #[test]
    fn pytorchjob_replicas_bind_by_type_and_pods_by_their_replica_type_label() {
        let s = shape(
            "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nspec:\n  pytorchReplicaSpecs:\n    Master: {template: {spec: {containers: [{name: pytorch, resources: {limits: {cpu: '{{m}}'}}}]}}}\n    Worker: {template: {spec: {containers: [{name: pytorch, resources: {limits: {cpu: '{{w}}'}}}]}}}\n",
        );
        let worker_at =
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu";
        let pod = |replica_type: &str| {
            json!({"metadata": {"labels": {"training.kubeflow.org/replica-type": replica_type}},
                "spec": {"containers": [{"name": "pytorch", "resources": {"limits": {"cpu": "3"}}}]}})
        };
        assert_eq!(
            places_of(&s, WorkloadKind::Pod, &pod("worker"), worker_at),
            vec![r#"spec.containers[0].resources.limits.cpu="3""#]
        );
        assert!(places_of(&s, WorkloadKind::Pod, &pod("master"), worker_at).is_empty());
    }

    #[test]
    fn a_single_pod_template_applies_everywhere() {
        let s = shape(
            "spec: {template: {spec: {containers: [{resources: {limits: {cpu: '{{cpu}}'}}}]}}}",
        );
        let pt = json!({"spec": {"pytorchReplicaSpecs": {
            "Master": {"template": {"spec": {"containers": [{"name": "pytorch"}]}}},
            "Worker": {"template": {"spec": {"containers": [{"name": "pytorch"}]}}}}}});
        assert_eq!(
            places_of(
                &s,
                WorkloadKind::PyTorchJob,
                &pt,
                "spec.template.spec.containers[0].resources.limits.cpu"
            )
            .len(),
            2
        );
    }

    /// A kind with a head template at a nested path and a list of worker groups named by
    /// `groupName` that autoscale up to `maxReplicas` (a Ray cluster's shape), known only to
    /// this test.
    static GROUPS: crate::kinds::KindSpec = {
        use crate::kinds::*;
        static REPLICAS: Num = Num::holder(&["replicas"], 1);
        static MAX: Num = Num::holder(&["maxReplicas"], 1);
        static HOSTS: Num = Num::holder(&["numOfHosts"], 1);
        static COUNT: Num = Num::Mul(&REPLICAS, &HOSTS);
        static MOST: Num = Num::Max(&REPLICAS, &MAX);
        static SCALED: Num = Num::Mul(&MOST, &HOSTS);
        KindSpec {
            name: "Groups",
            group: "example.com",
            version: "v1",
            kind: "Groups",
            resource: "groups",
            positions: &[
                Position {
                    role: "head",
                    holders: Holders::At(&["spec", "cluster", "headGroupSpec"]),
                    template: &["template"],
                    naming: Naming::None,
                    replicas: Num::Lit(1),
                    at_most: Num::Lit(1),
                },
                Position {
                    role: "worker group",
                    holders: Holders::Each(&["spec", "cluster", "workerGroupSpecs"]),
                    template: &["template"],
                    naming: Naming::Field("groupName"),
                    replicas: Num::Mul(&REPLICAS, &HOSTS),
                    at_most: Num::If {
                        when: Cond::True {
                            from: From::Object,
                            at: &["spec", "cluster", "autoscaling"],
                        },
                        then: &SCALED,
                        otherwise: &COUNT,
                    },
                },
            ],
            run: Run {
                deadline: crate::kinds::Deadline::EachPod,
                ends: crate::kinds::Ends::WithRun,
                ..Run::UNSTATED
            },
            webhook_rule: "test",
            ..KindSpec::BASE
        }
    };

    #[test]
    fn a_list_at_a_nested_path_binds_by_its_naming_field_and_counts_reach_the_scaling_bound() {
        let kind = WorkloadKind::unregistered(&GROUPS);
        let leaf = |anchor, at: &str, rel: &str, value: Value| TemplateLeaf {
            anchor,
            path: FieldPath::parse(rel).unwrap(),
            template_path: FieldPath::parse(at).unwrap(),
            content: LeafContent::Literal(value),
            under_macro_key: false,
        };
        let list = "spec.cluster.workerGroupSpecs";
        let leaves = vec![
            leaf(
                Anchor::Root,
                &format!("kubernetes.{list}[0].groupName"),
                &format!("{list}[0].groupName"),
                json!("small"),
            ),
            leaf(
                Anchor::Root,
                &format!("kubernetes.{list}[1].groupName"),
                &format!("{list}[1].groupName"),
                json!("gpu"),
            ),
            leaf(
                Anchor::PodTemplate,
                &format!("kubernetes.{list}[1].template.spec.containers[0].name"),
                "spec.containers[0].name",
                json!("ray-worker"),
            ),
            leaf(
                Anchor::PodTemplate,
                "kubernetes.spec.cluster.headGroupSpec.template.spec.containers[0].name",
                "spec.containers[0].name",
                json!("ray-head"),
            ),
        ];
        let s = TemplateShape::of(Some(kind), &leaves);
        let roles: Vec<_> = s.pod_templates.iter().map(|t| t.role.as_deref()).collect();
        assert_eq!(roles, vec![Some("gpu"), None]);
        let group = |name: &str, replicas: i64, max: i64| {
            json!({"groupName": name, "replicas": replicas, "maxReplicas": max, "numOfHosts": 2,
                   "template": {"spec": {"containers": [{"name": "ray-worker"}]}}})
        };
        let places = |object: &Value, at: &str| -> Vec<String> {
            s.root_places(kind, object, &FieldPath::parse(at).unwrap())
                .into_iter()
                .map(|(p, v)| format!("{p}={}", v.map_or("-".into(), Value::to_string)))
                .collect()
        };
        let mut object = json!({"spec": {"cluster": {"autoscaling": true, "workerGroupSpecs": [
            group("gpu", 1, 8), group("small", 2, 2), group("extra", 1, 4)]}}});
        // Bound by name wherever the group is listed; a group the template does not name is
        // held too; an autoscaling group's maximum is held to the limit on its replicas.
        assert_eq!(
            places(&object, &format!("{list}[1].replicas")),
            vec![
                format!("{list}[0].replicas=1"),
                format!("{list}[2].replicas=1"),
                format!("{list}[0].maxReplicas=8"),
                format!("{list}[2].maxReplicas=4"),
            ]
        );
        // The naming field binds, so an extra group is not held to another's name; a
        // multiplier is not a scaling bound.
        assert_eq!(
            places(&object, &format!("{list}[1].groupName")),
            vec![format!("{list}[0].groupName=\"gpu\"")]
        );
        assert_eq!(
            places(&object, &format!("{list}[1].numOfHosts")),
            vec![
                format!("{list}[0].numOfHosts=2"),
                format!("{list}[2].numOfHosts=2")
            ]
        );
        object["spec"]["cluster"]["autoscaling"] = json!(false);
        assert_eq!(
            places(&object, &format!("{list}[0].replicas")),
            vec![
                format!("{list}[1].replicas=2"),
                format!("{list}[2].replicas=1")
            ]
        );
        let renamed = json!({"spec": {"cluster": {"workerGroupSpecs": [group("other", 1, 1)]}}});
        assert_eq!(
            places(&renamed, &format!("{list}[1].replicas")),
            vec![
                format!("{list}[0].replicas=1"),
                format!("{list}[groupName=gpu].replicas=-"),
            ]
        );
    }

    /// A surge (an int-or-percent amount added to a count, as a rolling update's `maxSurge`)
    /// is no scaling bound of the count: a limit on `spec.replicas` is not compared with
    /// `"50%"` or with a number of extra groups; the totals count the groups it adds.
    #[test]
    fn a_surge_is_no_scaling_bound_of_the_count_it_adds_to() {
        use crate::kinds::*;
        static GROUPS: Num = Num::object(&["spec", "replicas"], 1);
        static SURGE: Num = Num::Scaled {
            from: From::Object,
            at: &["spec", "maxSurge"],
            of: &GROUPS,
            default: 0,
        };
        static MOST: Num = Num::Add(&GROUPS, &SURGE);
        let position = Position {
            role: "group",
            holders: Holders::At(&["spec", "group"]),
            template: &["template"],
            naming: Naming::None,
            replicas: Num::Mul(&GROUPS, &Num::Lit(1)),
            at_most: Num::Mul(&MOST, &Num::Lit(1)),
        };
        for (surge, most) in [(json!("50%"), 3), (json!(3), 5), (json!(null), 2)] {
            let object = json!({"spec": {"replicas": 2, "maxSurge": surge, "group": {}}});
            let holder = &object["spec"]["group"];
            assert_eq!(scaling_bounds(&position, &object, holder, None), vec![]);
            assert_eq!(position.at_most.eval(&object, holder, None), most);
        }
    }
}
