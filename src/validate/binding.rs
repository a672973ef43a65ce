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

use super::check::Source;
use super::path::{self, FieldPath, Segment};
use super::schema::Schema;
use super::template::{Anchor, LeafContent, Piece, TemplateLeaf};
use super::{FieldLimit, VariableLimit};
use crate::json::Pointer as _;
use crate::quantity::Quantity;
use crate::workload::{
    self, CONTAINER_LISTS, ContainerRole, TemplateInfo, TemplateRole, WorkloadKind,
};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};

/// Pod label/annotation naming a Volcano pod's task.
const VOLCANO_TASK_KEY: &str = "volcano.sh/task-spec";
/// Pod label naming a PyTorchJob pod's replica type (lowercase).
const PYTORCH_REPLICA_KEY: &str = "training.kubeflow.org/replica-type";
/// The replicated job a JobSet's pod belongs to (label set by JobSet's controller).
const REPLICATED_JOB_KEY: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// One pod template of the queue template.
#[derive(Debug, Clone, Default)]
struct PodTemplateShape {
    /// Where it is in the template, e.g. `spec.tasks[1].template`.
    path: FieldPath,
    /// Its role: the Volcano task name or the PyTorchJob replica type.
    role: Option<String>,
    /// Container names by (list, index).
    names: HashMap<(&'static str, usize), String>,
}

/// The pod templates of the queue template, with their roles and container names.
#[derive(Debug, Clone, Default)]
pub(super) struct TemplateShape {
    pod_templates: Vec<PodTemplateShape>,
    /// A Volcano template's task names by their position in its `spec.tasks` (a JobSet
    /// template's replicated job names by their position in `spec.replicatedJobs`).
    task_names: BTreeMap<usize, String>,
    /// A PyTorchJob template's replica types (`spec.pytorchReplicaSpecs` keys).
    replica_types: Vec<String>,
}

/// The role of a pod template of the workload: the Volcano task name,
/// the PyTorchJob replica type, or for a Pod the task / replica type it carries.
fn role_of(info: &TemplateInfo, template: &Map<String, Value>) -> Option<String> {
    let role = match &info.role {
        TemplateRole::VolcanoTask { name, .. } => Some(name.clone()),
        TemplateRole::PyTorchReplica { replica_type } => Some(replica_type.clone()),
        TemplateRole::ReplicatedJob { name, .. } => Some(name.clone()),
        TemplateRole::JobTemplate => None,
        TemplateRole::Pod => workload::label(template, VOLCANO_TASK_KEY)
            .or_else(|| workload::annotation(template, VOLCANO_TASK_KEY))
            .or_else(|| workload::label(template, PYTORCH_REPLICA_KEY))
            .or_else(|| workload::label(template, REPLICATED_JOB_KEY))
            .map(str::to_string),
    };
    role.filter(|r| !r.is_empty())
}

/// The role of the template's pod template at `prefix` (a template of `kind`): a Volcano
/// task's `name` (the sibling of its `template`), a PyTorchJob replica type (the key holding
/// its `template`). Read from the leaves, so it does not depend on where the template text
/// put the workload.
fn template_role(
    kind: Option<WorkloadKind>,
    prefix: &[Segment],
    leaves: &[TemplateLeaf],
) -> Option<String> {
    // A JobSet's pod template: spec.replicatedJobs[i].template.spec.template, named by the
    // replicated job's `name`.
    if kind == Some(WorkloadKind::JobSet) {
        let [spec, jobs, index @ Segment::Index(_), ..] = prefix else {
            return None;
        };
        let name_at = [
            spec.clone(),
            jobs.clone(),
            index.clone(),
            Segment::Key("name".into()),
        ];
        return leaves
            .iter()
            .find_map(|l| match &l.content {
                LeafContent::Literal(Value::String(name)) if l.template_path.0 == name_at => {
                    Some(name.clone())
                }
                _ => None,
            })
            .filter(|r| !r.is_empty());
    }
    let [parent @ .., holder, Segment::Key(template)] = prefix else {
        return None;
    };
    if template != "template" {
        return None;
    }
    match kind? {
        WorkloadKind::VolcanoJob => {
            let mut name_at = parent.to_vec();
            name_at.push(holder.clone());
            name_at.push(Segment::Key("name".into()));
            leaves.iter().find_map(|l| match &l.content {
                LeafContent::Literal(Value::String(name)) if l.template_path.0 == name_at => {
                    Some(name.clone())
                }
                _ => None,
            })
        }
        WorkloadKind::PyTorchJob => match holder {
            Segment::Key(replica_type) => Some(replica_type.clone()),
            _ => None,
        },
        WorkloadKind::BatchJob
        | WorkloadKind::Pod
        | WorkloadKind::JobSet
        | WorkloadKind::TrainJob => None,
    }
    .filter(|r| !r.is_empty())
}

/// The list of a kind whose entries are bound by `name` (Volcano tasks, JobSet replicated jobs).
fn named_list(kind: Option<WorkloadKind>) -> Option<&'static str> {
    match kind? {
        WorkloadKind::VolcanoJob => Some("tasks"),
        WorkloadKind::JobSet => Some("replicatedJobs"),
        _ => None,
    }
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
    /// positions are), their roles and their containers' names.
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
                    pod_templates.push(PodTemplateShape {
                        path: FieldPath(prefix.to_vec()),
                        role: template_role(kind, prefix, leaves),
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
        let mut task_names = BTreeMap::new();
        let mut replica_types: Vec<String> = Vec::new();
        for leaf in leaves.iter().filter(|l| l.anchor == Anchor::Root) {
            match leaf.path.0.as_slice() {
                [
                    Segment::Key(spec),
                    Segment::Key(tasks),
                    Segment::Index(i),
                    Segment::Key(name),
                ] if spec == "spec"
                    && Some(tasks.as_str()) == named_list(kind)
                    && name == "name" =>
                {
                    if let LeafContent::Literal(Value::String(n)) = &leaf.content {
                        task_names.insert(*i, n.clone());
                    }
                }
                [Segment::Key(spec), Segment::Key(specs), Segment::Key(t), ..]
                    if spec == "spec"
                        && specs == "pytorchReplicaSpecs"
                        && !replica_types.iter().any(|r| r.eq_ignore_ascii_case(t)) =>
                {
                    replica_types.push(t.clone());
                }
                _ => {}
            }
        }
        for t in &pod_templates {
            if kind == Some(WorkloadKind::PyTorchJob)
                && let Some(role) = &t.role
                && !replica_types.iter().any(|r| r.eq_ignore_ascii_case(role))
            {
                replica_types.push(role.clone());
            }
        }
        TemplateShape {
            pod_templates,
            task_names,
            replica_types,
        }
    }

    /// Every place of the workload (of `kind`) that the root-anchored template position `path`
    /// designates, with its value (`None` when absent), bound to what runs rather than to a
    /// list position:
    ///
    /// * a Volcano task's position (`spec.tasks[i].replicas`), or a JobSet replicated job's
    ///   (`spec.replicatedJobs[i].replicas`), is the workload's task of the
    ///   same name, wherever it is in the list; a task the template does not name (an extra
    ///   task) is held to every task's positions, so it cannot escape them;
    /// * a PyTorchJob replica type's position is the workload's replica type of the same name
    ///   compared case-insensitively (the training operator normalises `worker` to `Worker`),
    ///   and a type the template does not name is held to every type's positions; the Worker
    ///   replicas of an elastic job also reach `spec.elasticPolicy.maxReplicas`.
    pub(super) fn root_places<'a>(
        &self,
        kind: WorkloadKind,
        object: &'a Value,
        path: &FieldPath,
    ) -> Vec<(String, Option<&'a Value>)> {
        let key = |s: &Segment, k: &str| matches!(s, Segment::Key(x) if x == k);
        match (kind, path.0.as_slice()) {
            (
                WorkloadKind::VolcanoJob | WorkloadKind::JobSet,
                [spec, tasks, Segment::Index(i), rest @ ..],
            ) if key(spec, "spec") && named_list(Some(kind)).is_some_and(|l| key(tasks, l)) => {
                let list = named_list(Some(kind)).unwrap_or_default();
                let want = self.task_names.get(i).map(String::as_str);
                let items = object
                    .get("spec")
                    .and_then(|s| s.get(list))
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let named =
                    |n: Option<&str>| n.is_some_and(|n| self.task_names.values().any(|t| t == n));
                // The task's name is what binds it: an extra task is not held to another's.
                let is_name = matches!(rest, [Segment::Key(k)] if k == "name");
                let mut out = Vec::new();
                for (j, task) in items.iter().enumerate() {
                    let name = workload::name_of(task);
                    if want.is_none() || name == want || (!named(name) && !is_name) {
                        out.extend(path::resolve(task, &format!("spec.{list}[{j}]"), rest));
                    }
                }
                if let Some(want) = want
                    && !items.iter().any(|t| workload::name_of(t) == Some(want))
                {
                    out.extend(path::resolve(
                        &ABSENT,
                        &format!("spec.{list}[name={want}]"),
                        rest,
                    ));
                }
                out
            }
            (WorkloadKind::PyTorchJob, [spec, specs, Segment::Key(want), rest @ ..])
                if key(spec, "spec") && key(specs, "pytorchReplicaSpecs") =>
            {
                let replicas = object
                    .get("spec")
                    .and_then(|s| s.get("pytorchReplicaSpecs"))
                    .and_then(Value::as_object);
                let mut out = Vec::new();
                let mut found = false;
                for (t, holder) in replicas.into_iter().flatten() {
                    let same = t.eq_ignore_ascii_case(want);
                    found |= same;
                    let described = self.replica_types.iter().any(|r| r.eq_ignore_ascii_case(t));
                    if same || !described {
                        let mut at = "spec.pytorchReplicaSpecs".to_string();
                        path::push_segment(&mut at, &Segment::Key(t.clone()));
                        out.extend(path::resolve(holder, &at, rest));
                    }
                }
                if !found {
                    let mut at = "spec.pytorchReplicaSpecs".to_string();
                    path::push_segment(&mut at, &Segment::Key(want.clone()));
                    out.extend(path::resolve(&ABSENT, &at, rest));
                }
                if want.eq_ignore_ascii_case("worker")
                    && matches!(rest, [Segment::Key(r)] if r == "replicas")
                    && let Some(max) = object.at("/spec/elasticPolicy/maxReplicas")
                {
                    out.push(("spec.elasticPolicy.maxReplicas".into(), Some(max)));
                }
                out
            }
            _ => path::resolve(object, "", &path.0),
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
        let prefix = &template_path.0[..template_path.0.len().saturating_sub(path.0.len())];
        let source = self.pod_templates.iter().find(|t| t.path.0 == prefix);
        let role = source
            .and_then(|s| s.role.as_deref())
            .filter(|_| self.pod_templates.len() > 1);
        let name = container
            .and_then(|key| source.and_then(|s| s.names.get(&key)))
            .map(String::as_str);
        (role, name)
    }

    /// True when the template's pod template `source` applies to the workload's `template`.
    fn binds(
        &self,
        source: Option<&PodTemplateShape>,
        info: &TemplateInfo,
        template: &Map<String, Value>,
    ) -> bool {
        match source.and_then(|s| s.role.as_deref()) {
            Some(want) if self.pod_templates.len() > 1 => {
                role_of(info, template).is_some_and(|r| r.eq_ignore_ascii_case(want))
            }
            _ => true,
        }
    }

    /// Which pod templates of a workload the template position `template_path` (`path`
    /// relative to its pod template) applies to, in words: `every pod template`, or
    /// `the Worker pod template` when the template has several and this one has a role.
    pub(super) fn pod_templates_of(&self, template_path: &FieldPath, path: &FieldPath) -> String {
        let prefix = &template_path.0[..template_path.0.len().saturating_sub(path.0.len())];
        let source = self.pod_templates.iter().find(|t| t.path.0 == prefix);
        match source.and_then(|s| s.role.as_deref()) {
            Some(role) if self.pod_templates.len() > 1 => format!("the {role} pod template"),
            _ => "every pod template".into(),
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
        let prefix = &template_path.0[..template_path.0.len().saturating_sub(path.0.len())];
        let source = self.pod_templates.iter().find(|t| t.path.0 == prefix);
        let mut out = Vec::new();
        for (info, template) in templates {
            if !self.binds(source, info, template) {
                continue;
            }
            let Some((list, index, rest)) = container_of(path) else {
                out.extend(path::resolve_in_map(template, &info.path, &path.0));
                continue;
            };
            let name = source.and_then(|s| s.names.get(&(list, index)));
            let items = template
                .get("spec")
                .and_then(|s| s.get(list))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let name_of = |c: &Value| crate::workload::name_of(c).map(str::to_string);
            let found = match name {
                Some(name) => items.iter().position(|c| name_of(c).as_ref() == Some(name)),
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
            let mut base = info.spec_path();
            path::push_segment(&mut base, &Segment::Key(list.to_string()));
            match (found, name) {
                (Some(j), _) => {
                    path::push_segment(&mut base, &Segment::Index(j));
                    out.extend(path::resolve(&items[j], &base, rest));
                }
                (None, Some(name)) => {
                    base.push_str(&format!("[name={name}]"));
                    out.extend(path::resolve(&ABSENT, &base, rest));
                }
                (None, None) => {
                    path::push_segment(&mut base, &Segment::Index(index));
                    out.extend(path::resolve(&ABSENT, &base, rest));
                }
            }
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

/// `spec.<list>[i or *].resources.<limits|requests>.<resource>`: (limits|requests, resource).
fn resource_of(path: &FieldPath) -> Option<(String, String)> {
    match path.0.as_slice() {
        [
            Segment::Key(spec),
            Segment::Key(list),
            Segment::Index(_) | Segment::AnyIndex,
            Segment::Key(resources),
            Segment::Key(kind),
            Segment::Key(resource),
        ] if spec == "spec"
            && CONTAINER_LISTS.contains(&list.as_str())
            && resources == "resources"
            && (kind == "limits" || kind == "requests") =>
        {
            Some((kind.clone(), resource.clone()))
        }
        _ => None,
    }
}

/// `spec.trainer.resourcesPerNode.<limits|requests>.<resource>` at a TrainJob's root: what
/// Trainer gives the `node` container of every node, so a container position too.
fn trainer_resource_of(path: &FieldPath) -> Option<(String, String)> {
    match path.0.as_slice() {
        [
            Segment::Key(spec),
            Segment::Key(trainer),
            Segment::Key(per_node),
            Segment::Key(kind),
            Segment::Key(resource),
        ] if spec == "spec"
            && trainer == "trainer"
            && per_node == "resourcesPerNode"
            && (kind == "limits" || kind == "requests") =>
        {
            Some((kind.clone(), resource.clone()))
        }
        _ => None,
    }
}

/// The resource a limit position bounds per container: in a pod template, or a TrainJob's
/// per-node resources.
fn container_resource_of(anchor: Anchor, path: &FieldPath) -> Option<(String, String)> {
    match anchor {
        Anchor::PodTemplate => resource_of(path),
        Anchor::Root => trainer_resource_of(path),
    }
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
            crate::validate::QueueLimits::compile(&cfg, "q").unwrap()
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
                let shown = c.schema.problem(&json!("1e12")).unwrap_or_default();
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
}
