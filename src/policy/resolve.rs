//! Is this object a launch workload, and which queue does it belong to?

use super::{Policy, Queue};
use crate::workload::{self, WorkloadKind};
use serde_json::{Map, Value};

/// How an object relates to launchgate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkloadMatch {
    /// A launch workload: mutate and validate it.
    Launch,
    /// Carries an exclude label (e.g. `wandb: launch` on a kaniko build pod): never touched.
    Excluded { label: String },
    /// Not a launch workload: passes through untouched.
    NotLaunch,
}

/// Where the queue name came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSource {
    Label,
    ContainerEnv,
    NamespaceDefault,
    GlobalDefault,
}

/// The queue a workload belongs to.
#[derive(Debug)]
pub struct QueueResolution<'p> {
    pub queue: &'p Queue,
    /// The name the workload asked for, when it named one.
    pub requested: Option<String>,
    pub source: QueueSource,
    /// Set when the requested queue is not configured and a default was used instead.
    pub warning: Option<String>,
}

impl Policy {
    /// Decides whether an object (or any of its pod templates) is a launch workload.
    pub fn classify(&self, kind: WorkloadKind, object: &Value) -> WorkloadMatch {
        let rules = &self.config.match_rules;
        let Some(obj) = object.as_object() else {
            return WorkloadMatch::NotLaunch;
        };
        let mut carriers: Vec<&Map<String, Value>> = vec![obj];
        if kind.is_job() {
            carriers.extend(
                workload::templates(kind, object)
                    .into_iter()
                    .map(|(_, t)| t),
            );
        }
        for c in &carriers {
            for (key, value) in &rules.exclude_labels {
                if workload::label(c, key) == Some(value.as_str()) {
                    return WorkloadMatch::Excluded {
                        label: format!("{key}={value}"),
                    };
                }
            }
        }
        let marked = carriers.iter().any(|c| {
            workload::labels(c).is_some_and(|l| {
                rules
                    .launch_labels
                    .iter()
                    .chain(&rules.queue_labels)
                    .any(|k| l.contains_key(k))
            })
        });
        if marked {
            WorkloadMatch::Launch
        } else {
            WorkloadMatch::NotLaunch
        }
    }

    /// The queue a launch workload belongs to: queue label, container env, namespace
    /// default, global default — in that order. `None` when nothing names a configured queue.
    pub fn resolve_queue(
        &self,
        kind: WorkloadKind,
        object: &Value,
        namespace: Option<&str>,
    ) -> Option<QueueResolution<'_>> {
        let requested = self
            .queue_from_labels(kind, object)
            .map(|n| (n, QueueSource::Label))
            .or_else(|| {
                self.queue_from_env(kind, object)
                    .map(|n| (n, QueueSource::ContainerEnv))
            });
        if let Some((name, source)) = &requested
            && let Some(queue) = self.queue(name)
        {
            return Some(QueueResolution {
                queue,
                requested: Some(name.clone()),
                source: *source,
                warning: None,
            });
        }
        let fallback = namespace
            .and_then(|ns| self.config.namespace_queues.get(ns))
            .map(|q| (q, QueueSource::NamespaceDefault))
            .or_else(|| {
                self.config
                    .default_queue
                    .as_ref()
                    .map(|q| (q, QueueSource::GlobalDefault))
            })
            .and_then(|(name, source)| self.queue(name).map(|q| (q, source)));
        let (queue, source) = fallback?;
        let warning = requested.as_ref().map(|(name, _)| {
            format!(
                "launchgate: queue {name:?} is not configured; applied the defaults of queue {:?}",
                queue.name
            )
        });
        Some(QueueResolution {
            queue,
            requested: requested.map(|(n, _)| n),
            source,
            warning,
        })
    }

    fn queue_from_labels(&self, kind: WorkloadKind, object: &Value) -> Option<String> {
        let obj = object.as_object()?;
        let templates = if kind.is_job() {
            workload::templates(kind, object)
        } else {
            Vec::new()
        };
        for key in &self.config.match_rules.queue_labels {
            let found = std::iter::once(obj)
                .chain(templates.iter().map(|(_, t)| *t))
                .find_map(|c| workload::label(c, key));
            if let Some(name) = found.filter(|n| !n.is_empty()) {
                return Some(name.to_string());
            }
        }
        None
    }

    fn queue_from_env(&self, kind: WorkloadKind, object: &Value) -> Option<String> {
        let env_name = self.config.match_rules.queue_env.as_deref()?;
        workload::templates(kind, object)
            .into_iter()
            .filter_map(|(_, template)| template.get("spec").and_then(Value::as_object))
            .flat_map(workload::containers)
            // The value the container sees: the last entry of that name.
            .find_map(|c| workload::effective_env_value(c, env_name).filter(|v| !v.is_empty()))
            .map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy() -> Policy {
        Policy::from_yaml(
            "defaultQueue: a\nnamespaceQueues: {teamb: b}\nqueues:\n  a: {}\n  b: {}\n  c: {}\n",
        )
        .unwrap()
    }

    #[test]
    fn classify_by_labels_and_exclusion() {
        let p = policy();
        let pod = |labels: Value| json!({"metadata": {"labels": labels}, "spec": {}});
        assert_eq!(
            p.classify(WorkloadKind::Pod, &pod(json!({"wandb.ai/monitor": "true"}))),
            WorkloadMatch::Launch
        );
        assert_eq!(
            p.classify(WorkloadKind::Pod, &pod(json!({"queue": "x"}))),
            WorkloadMatch::Launch
        );
        assert!(matches!(
            p.classify(
                WorkloadKind::Pod,
                &pod(json!({"wandb": "launch", "queue": "x"}))
            ),
            WorkloadMatch::Excluded { .. }
        ));
        assert_eq!(
            p.classify(WorkloadKind::Pod, &pod(json!({"app": "web"}))),
            WorkloadMatch::NotLaunch
        );
        let job = json!({"spec": {"template": {"metadata": {"labels": {"wandb.ai/agent": "a"}}}}});
        assert_eq!(
            p.classify(WorkloadKind::BatchJob, &job),
            WorkloadMatch::Launch
        );
    }

    #[test]
    fn queue_resolution_order() {
        let p = policy();
        let with = |labels: Value, env: Value| json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "env": env}]}});
        let r = p
            .resolve_queue(
                WorkloadKind::Pod,
                &with(json!({"queue": "c"}), json!([])),
                None,
            )
            .unwrap();
        assert_eq!((r.queue.name.as_str(), r.source), ("c", QueueSource::Label));
        let env = json!([{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "b"}]);
        let r = p
            .resolve_queue(WorkloadKind::Pod, &with(json!({}), env), None)
            .unwrap();
        assert_eq!(
            (r.queue.name.as_str(), r.source),
            ("b", QueueSource::ContainerEnv)
        );
        let r = p
            .resolve_queue(
                WorkloadKind::Pod,
                &with(json!({}), json!([])),
                Some("teamb"),
            )
            .unwrap();
        assert_eq!(r.source, QueueSource::NamespaceDefault);
        let r = p
            .resolve_queue(
                WorkloadKind::Pod,
                &with(json!({"queue": "zz"}), json!([])),
                None,
            )
            .unwrap();
        assert_eq!(r.queue.name, "a");
        assert!(r.warning.unwrap().contains("zz"));
        // The agent appended a second WANDB_LAUNCH_QUEUE_NAME: the last one is what runs.
        let env = json!([{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "c"},
                         {"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "b"}]);
        let r = p
            .resolve_queue(WorkloadKind::Pod, &with(json!({}), env), None)
            .unwrap();
        assert_eq!(r.queue.name, "b");
    }
}
