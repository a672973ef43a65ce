//! The Workload view: the one place that knows where pod specs live.
//!
//! A bare Pod *is* its own template (`metadata` + `spec`); a batch/v1 Job has
//! `spec.template`; a Volcano Job has `spec.tasks[*].template`; a PyTorchJob has
//! `spec.pytorchReplicaSpecs.<Type>.template`. Mutators and limit checks ask this module for
//! templates and never match on kinds themselves.

pub mod edit;
pub mod intent;

use serde_json::{Map, Value};

/// The workload kinds launchgate understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// core/v1 Pod
    Pod,
    /// batch/v1 Job
    BatchJob,
    /// batch.volcano.sh/v1alpha1 Job
    VolcanoJob,
    /// kubeflow.org/v1 PyTorchJob
    PyTorchJob,
}

impl WorkloadKind {
    /// Recognises a kind from the admission request's group/version/kind.
    pub fn from_gvk(group: &str, version: &str, kind: &str) -> Option<Self> {
        match (group, version, kind) {
            ("", "v1", "Pod") => Some(Self::Pod),
            ("batch", "v1", "Job") => Some(Self::BatchJob),
            ("batch.volcano.sh", "v1alpha1", "Job") => Some(Self::VolcanoJob),
            ("kubeflow.org", "v1", "PyTorchJob") => Some(Self::PyTorchJob),
            _ => None,
        }
    }

    /// Recognises a kind from an object's `apiVersion` and `kind`.
    pub fn of_object(object: &Value) -> Option<Self> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Self::from_gvk(group, version, kind)
    }

    /// A short stable name (used in metrics and messages).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pod => "Pod",
            Self::BatchJob => "Job",
            Self::VolcanoJob => "VolcanoJob",
            Self::PyTorchJob => "PyTorchJob",
        }
    }

    /// True for the kinds that own pod templates (everything but a Pod).
    pub fn is_job(self) -> bool {
        !matches!(self, Self::Pod)
    }
}

/// Which template of the workload this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateRole {
    /// The Pod object itself.
    Pod,
    /// `spec.template` of a batch/v1 Job.
    JobTemplate,
    /// `spec.tasks[index].template` of a Volcano Job.
    VolcanoTask { index: usize, name: String },
    /// `spec.pytorchReplicaSpecs.<replica_type>.template` of a PyTorchJob.
    PyTorchReplica { replica_type: String },
}

/// Where a template sits and how many pods it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateInfo {
    pub role: TemplateRole,
    /// Dotted path of the template, e.g. `spec.tasks[1].template` (empty for a Pod).
    pub path: String,
    /// How many pods run from this template (`replicas`, `parallelism`; 1 for a Pod).
    pub replicas: i64,
}

impl TemplateInfo {
    /// Dotted path of the pod spec, e.g. `spec.template.spec`.
    pub fn spec_path(&self) -> String {
        if self.path.is_empty() {
            "spec".to_string()
        } else {
            format!("{}.spec", self.path)
        }
    }
}

fn int_at(v: Option<&Value>, default: i64) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(default)
}

/// Calls `f` for every pod template of the workload with the template object
/// (a map holding `metadata` and `spec`). Malformed shapes are skipped, never a panic.
pub fn for_each_template_mut(
    kind: WorkloadKind,
    object: &mut Value,
    mut f: impl FnMut(&TemplateInfo, &mut Map<String, Value>),
) {
    match kind {
        WorkloadKind::Pod => {
            if let Some(map) = object.as_object_mut() {
                let info = TemplateInfo {
                    role: TemplateRole::Pod,
                    path: String::new(),
                    replicas: 1,
                };
                f(&info, map);
            }
        }
        WorkloadKind::BatchJob => {
            let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
                return;
            };
            let replicas = int_at(spec.get("parallelism"), 1);
            if let Some(t) = spec.get_mut("template").and_then(Value::as_object_mut) {
                let info = TemplateInfo {
                    role: TemplateRole::JobTemplate,
                    path: "spec.template".into(),
                    replicas,
                };
                f(&info, t);
            }
        }
        WorkloadKind::VolcanoJob => {
            let Some(tasks) = object
                .pointer_mut("/spec/tasks")
                .and_then(Value::as_array_mut)
            else {
                return;
            };
            for (index, task) in tasks.iter_mut().enumerate() {
                let Some(task) = task.as_object_mut() else {
                    continue;
                };
                let name = task
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let replicas = int_at(task.get("replicas"), 1);
                if let Some(t) = task.get_mut("template").and_then(Value::as_object_mut) {
                    let info = TemplateInfo {
                        role: TemplateRole::VolcanoTask { index, name },
                        path: format!("spec.tasks[{index}].template"),
                        replicas,
                    };
                    f(&info, t);
                }
            }
        }
        WorkloadKind::PyTorchJob => {
            let Some(specs) = object
                .pointer_mut("/spec/pytorchReplicaSpecs")
                .and_then(Value::as_object_mut)
            else {
                return;
            };
            for (replica_type, rs) in specs.iter_mut() {
                let Some(rs) = rs.as_object_mut() else {
                    continue;
                };
                let replicas = int_at(rs.get("replicas"), 1);
                if let Some(t) = rs.get_mut("template").and_then(Value::as_object_mut) {
                    let info = TemplateInfo {
                        role: TemplateRole::PyTorchReplica {
                            replica_type: replica_type.clone(),
                        },
                        path: format!("spec.pytorchReplicaSpecs.{replica_type}.template"),
                        replicas,
                    };
                    f(&info, t);
                }
            }
        }
    }
}

/// Read-only list of the templates of a workload.
pub fn templates(kind: WorkloadKind, object: &Value) -> Vec<(TemplateInfo, &Map<String, Value>)> {
    let mut out = Vec::new();
    match kind {
        WorkloadKind::Pod => {
            if let Some(map) = object.as_object() {
                out.push((
                    TemplateInfo {
                        role: TemplateRole::Pod,
                        path: String::new(),
                        replicas: 1,
                    },
                    map,
                ));
            }
        }
        WorkloadKind::BatchJob => {
            let spec = object.get("spec");
            let replicas = int_at(spec.and_then(|s| s.get("parallelism")), 1);
            if let Some(t) = spec
                .and_then(|s| s.get("template"))
                .and_then(Value::as_object)
            {
                out.push((
                    TemplateInfo {
                        role: TemplateRole::JobTemplate,
                        path: "spec.template".into(),
                        replicas,
                    },
                    t,
                ));
            }
        }
        WorkloadKind::VolcanoJob => {
            if let Some(tasks) = object.pointer("/spec/tasks").and_then(Value::as_array) {
                for (index, task) in tasks.iter().enumerate() {
                    let name = task
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    let replicas = int_at(task.get("replicas"), 1);
                    if let Some(t) = task.get("template").and_then(Value::as_object) {
                        out.push((
                            TemplateInfo {
                                role: TemplateRole::VolcanoTask { index, name },
                                path: format!("spec.tasks[{index}].template"),
                                replicas,
                            },
                            t,
                        ));
                    }
                }
            }
        }
        WorkloadKind::PyTorchJob => {
            if let Some(specs) = object
                .pointer("/spec/pytorchReplicaSpecs")
                .and_then(Value::as_object)
            {
                for (replica_type, rs) in specs {
                    let replicas = int_at(rs.get("replicas"), 1);
                    if let Some(t) = rs.get("template").and_then(Value::as_object) {
                        out.push((
                            TemplateInfo {
                                role: TemplateRole::PyTorchReplica {
                                    replica_type: replica_type.clone(),
                                },
                                path: format!("spec.pytorchReplicaSpecs.{replica_type}.template"),
                                replicas,
                            },
                            t,
                        ));
                    }
                }
            }
        }
    }
    out
}

/// The container lists of a pod spec that launchgate treats as "containers".
pub const CONTAINER_LISTS: [&str; 2] = ["containers", "initContainers"];

/// What a container is to its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerRole {
    /// An entry of `containers`.
    App,
    /// An entry of `initContainers` that runs to completion before the app containers.
    Init,
    /// A native sidecar: an entry of `initContainers` with `restartPolicy: Always`; it keeps
    /// running next to the app containers.
    Sidecar,
}

/// One container of a pod spec with where it is and its role.
#[derive(Debug, Clone, Copy)]
pub struct PodContainer<'a> {
    /// `containers` or `initContainers`.
    pub list: &'static str,
    pub index: usize,
    pub role: ContainerRole,
    pub container: &'a Value,
}

/// Every container entry of a pod spec (`containers`, then `initContainers`, in order) with
/// its list and index; entries that are not objects are skipped. The one read-only container
/// walk ([`pod_containers`] and [`containers`] are views of it).
pub fn container_entries(
    pod_spec: &Map<String, Value>,
) -> impl Iterator<Item = (&'static str, usize, &Value)> {
    CONTAINER_LISTS.into_iter().flat_map(move |list| {
        pod_spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, c)| c.is_object())
            .map(move |(index, c)| (list, index, c))
    })
}

/// Every container of a pod template (`spec.containers`, then `spec.initContainers` in
/// order), each with its role. Entries that are not objects are skipped.
pub fn pod_containers(template: &Map<String, Value>) -> Vec<PodContainer<'_>> {
    let Some(spec) = template.get("spec").and_then(Value::as_object) else {
        return Vec::new();
    };
    container_entries(spec)
        .map(|(list, index, container)| {
            let role = if list == CONTAINER_LISTS[0] {
                ContainerRole::App
            } else if container.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
                ContainerRole::Sidecar
            } else {
                ContainerRole::Init
            };
            PodContainer {
                list,
                index,
                role,
                container,
            }
        })
        .collect()
}

/// `template.spec` as a mutable map, if present.
pub fn pod_spec_mut(template: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    template.get_mut("spec").and_then(Value::as_object_mut)
}

/// Calls `f` for each container map in `containers` and `initContainers` of a pod spec,
/// with the list name and the index. The one mutable container walk: every mutator that
/// touches containers goes through it (or [`for_each_app_container_mut`]).
pub fn for_each_container_mut(
    pod_spec: &mut Map<String, Value>,
    mut f: impl FnMut(&str, usize, &mut Map<String, Value>),
) {
    for list in CONTAINER_LISTS {
        if let Some(items) = pod_spec.get_mut(list).and_then(Value::as_array_mut) {
            for (i, c) in items.iter_mut().enumerate() {
                if let Some(c) = c.as_object_mut() {
                    f(list, i, c);
                }
            }
        }
    }
}

/// Calls `f` for each app container (`spec.containers`, not init containers) with its index.
pub fn for_each_app_container_mut(
    pod_spec: &mut Map<String, Value>,
    mut f: impl FnMut(usize, &mut Map<String, Value>),
) {
    for_each_container_mut(pod_spec, |list, i, c| {
        if list == CONTAINER_LISTS[0] {
            f(i, c)
        }
    });
}

/// Every container map of a pod spec (`containers`, then `initContainers`), read-only.
pub fn containers(pod_spec: &Map<String, Value>) -> impl Iterator<Item = &Map<String, Value>> {
    container_entries(pod_spec).filter_map(|(_, _, c)| c.as_object())
}

/// The env entry the container will see for `name`.
///
/// The one env reader. When a name appears more than once in `env` (the W&B agent and
/// Volcano's pytorch plugin both append), the kubelet uses the **last** entry, so every
/// "is it set / to what" question is answered from the last entry of that name.
pub fn effective_env<'a>(container: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    container
        .get("env")?
        .as_array()?
        .iter()
        .rev()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
}

/// The literal `value` the container will see for `name` (`None` when unset or `valueFrom`).
pub fn effective_env_value<'a>(container: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    effective_env(container, name)?.get("value")?.as_str()
}

/// True when `name` appears more than once in the container's `env` (so the earlier entries
/// are shadowed by the last).
pub fn env_is_shadowed(container: &Map<String, Value>, name: &str) -> bool {
    container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e.get("name").and_then(Value::as_str) == Some(name))
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

/// `metadata.<key>` as a mutable map, created when missing (or replaced when not a map).
pub fn metadata_map_mut<'a>(
    object: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    let meta = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let entry = meta
        .as_object_mut()
        .expect("just made an object")
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut().expect("just made an object")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_are_recognised() {
        assert_eq!(
            WorkloadKind::from_gvk("", "v1", "Pod"),
            Some(WorkloadKind::Pod)
        );
        assert_eq!(
            WorkloadKind::from_gvk("batch.volcano.sh", "v1alpha1", "Job"),
            Some(WorkloadKind::VolcanoJob)
        );
        assert_eq!(WorkloadKind::from_gvk("apps", "v1", "Deployment"), None);
        assert_eq!(
            WorkloadKind::of_object(&json!({"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob"})),
            Some(WorkloadKind::PyTorchJob)
        );
    }

    #[test]
    fn volcano_tasks_and_pytorch_replicas_are_visited() {
        let mut vc = json!({"spec":{"tasks":[
            {"name":"master","replicas":1,"template":{"spec":{"containers":[]}}},
            {"name":"worker","replicas":2,"template":{"spec":{"containers":[]}}},
            "garbage"
        ]}});
        let mut seen = vec![];
        for_each_template_mut(WorkloadKind::VolcanoJob, &mut vc, |i, _| {
            seen.push((i.path.clone(), i.replicas))
        });
        assert_eq!(
            seen,
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
    fn pod_containers_walk_every_list_with_roles() {
        let t = json!({"spec": {"containers": [{"name": "a"}, "junk", {"name": "b"}],
            "initContainers": [{"name": "i"}, {"name": "s", "restartPolicy": "Always"}]}});
        let found: Vec<_> = pod_containers(t.as_object().unwrap())
            .into_iter()
            .map(|c| {
                (
                    c.list,
                    c.index,
                    c.role,
                    c.container["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            found,
            vec![
                ("containers", 0, ContainerRole::App, "a"),
                ("containers", 2, ContainerRole::App, "b"),
                ("initContainers", 0, ContainerRole::Init, "i"),
                ("initContainers", 1, ContainerRole::Sidecar, "s"),
            ]
        );
        assert!(pod_containers(json!({"spec": 1}).as_object().unwrap()).is_empty());
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
    fn container_walks_cover_both_lists() {
        let mut spec = json!({"containers": [{"name": "a"}, 3], "initContainers": [{"name": "i"}]});
        let spec = spec.as_object_mut().unwrap();
        let names: Vec<_> = containers(spec)
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a", "i"]);
        let mut apps = vec![];
        for_each_app_container_mut(spec, |i, c| apps.push((i, c["name"].clone())));
        assert_eq!(apps, [(0, json!("a"))]);
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
                for_each_template_mut(kind, &mut v, |_, _| {});
                let _ = templates(kind, &v);
            }
        }
    }
}
