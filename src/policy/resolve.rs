//! Is this object a launch workload, and which queue does it belong to?

use super::exemption::{Exemption, ExemptionCheck, Requester, check_request};
use super::{Policy, Queue};
use crate::workload::{self, WorkloadKind};
use serde_json::{Map, Value};

/// How an object relates to launchgate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WorkloadMatch {
    /// A launch workload: mutate and validate it (unless an exemption covers the request).
    Launch,
    /// Not a launch workload: passes through untouched.
    NotLaunch,
}

/// The queue a workload belongs to.
#[derive(Debug)]
pub(crate) struct QueueResolution<'p> {
    pub(crate) queue: &'p Queue,
    /// Set when the requested queue is not configured and a default was used instead.
    pub(crate) warning: Option<crate::rules::Warning>,
}

/// The object and, for the kinds that have them, its pod templates: where launch labels and
/// exemption labels are read.
fn label_carriers(kind: WorkloadKind, object: &Value) -> Vec<&Map<String, Value>> {
    let Some(obj) = object.as_object() else {
        return Vec::new();
    };
    let mut carriers = vec![obj];
    if kind.is_job() {
        carriers.extend(
            workload::templates(kind, object)
                .into_iter()
                .map(|(_, t)| t),
        );
    }
    carriers
}

impl Policy {
    /// Decides whether an object (or any of its pod templates) is a launch workload. Labels
    /// only mark a launch workload: they never take one out of policy (see [`Exemption`]).
    pub(crate) fn classify(&self, kind: WorkloadKind, object: &Value) -> WorkloadMatch {
        // A label that only names the queue (`queueNameLabels`) never marks one.
        let rules = &self.config.match_rules;
        let marked = label_carriers(kind, object).iter().any(|c| {
            workload::labels(c).is_some_and(|l| rules.marking_labels().any(|k| l.contains_key(k)))
        });
        if marked {
            WorkloadMatch::Launch
        } else {
            WorkloadMatch::NotLaunch
        }
    }

    /// True when `object` (in `namespace`) is a launch workload of `queue`: what an UPDATE's
    /// old object must be for the UPDATE to be judged against it. An object that was no launch
    /// workload, or another queue's, was never judged in `queue`: an UPDATE that brings it in
    /// is judged as a CREATE (the native policies compile the same test,
    /// `native::select::in_queue`).
    pub(crate) fn in_queue(
        &self,
        kind: WorkloadKind,
        object: &Value,
        namespace: Option<&str>,
        queue: &Queue,
    ) -> bool {
        self.classify(kind, object) == WorkloadMatch::Launch
            && self
                .resolve_queue(kind, object, namespace)
                .is_some_and(|was| std::ptr::eq(was.queue, queue))
    }

    /// What `exemptions` (the global list or a queue's) say about a request from `who` for
    /// `object`.
    pub(crate) fn exemptions_for<'e>(
        &self,
        exemptions: &'e [Exemption],
        kind: WorkloadKind,
        object: &Value,
        who: &Requester<'_>,
    ) -> ExemptionCheck<'e> {
        if exemptions.is_empty() {
            return ExemptionCheck::default();
        }
        check_request(exemptions, who, kind, object)
    }

    /// The queue a launch workload belongs to: queue label, container env, namespace
    /// default, global default — in that order. `None` when nothing names a configured queue.
    pub(crate) fn resolve_queue(
        &self,
        kind: WorkloadKind,
        object: &Value,
        namespace: Option<&str>,
    ) -> Option<QueueResolution<'_>> {
        // The workload's own label, then its container env; else the namespace's default
        // queue, then the global one.
        let requested = self.queue_from_labels(kind, object).or_else(|| {
            let env = self.config.match_rules.queue_env.as_deref()?;
            env_value(kind, object, env)
        });
        // The entity only qualifies a requested name (read only then: it is a walk over every
        // container's env).
        let entity = requested.as_ref().and_then(|_| {
            let env = self.config.match_rules.queue_entity_env.as_deref()?;
            env_value(kind, object, env)
        });
        if let Some(name) = &requested
            && let Some(queue) = self.lookup_queue(name, entity.as_deref())
        {
            return Some(QueueResolution {
                queue,
                warning: None,
            });
        }
        let queue = namespace
            .and_then(|ns| self.config.namespace_queues.get(ns))
            .or(self.config.default_queue.as_ref())
            .and_then(|name| self.queue(name))?;
        let warning = requested.as_ref().map(|name| {
            let asked = match &entity {
                Some(entity) if !name.contains('/') => format!("{entity}/{name}"),
                _ => name.clone(),
            };
            crate::rules::Warning::new(
                crate::rules::QUEUE_UNKNOWN,
                format!(
                    "launchgate: queue {asked:?} is not configured; applied the defaults of queue {:?}",
                    queue.key
                ),
            )
        });
        Some(QueueResolution { queue, warning })
    }

    /// The configured queue for a W&B queue `name` in `entity`: `entity/name`, else `name`;
    /// without an entity, `name`, else the one `<entity>/name` when exactly one is configured.
    /// A name already of the form `entity/name` is looked up as is.
    pub(crate) fn lookup_queue(&self, name: &str, entity: Option<&str>) -> Option<&Queue> {
        if name.contains('/') {
            return self.queue(name);
        }
        if let Some(entity) = entity
            && let Some(queue) = self.queue(&format!("{entity}/{name}"))
        {
            return Some(queue);
        }
        // The name itself, or the valid label value launchgate wrote for a name that is none.
        if let Some(queue) = self.queue_by_name_or_label(name) {
            return Some(queue);
        }
        if entity.is_some() {
            return None;
        }
        let mut same_name = self
            .queues
            .values()
            .filter(|q| q.entity.is_some() && q.name == name);
        match (same_name.next(), same_name.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }

    /// The first of the queue labels, then of the labels that only name the queue, the object
    /// or one of its pod templates carries, non-empty.
    fn queue_from_labels(&self, kind: WorkloadKind, object: &Value) -> Option<String> {
        let carriers = label_carriers(kind, object);
        self.config
            .match_rules
            .naming_labels()
            .find_map(|key| {
                let found = carriers.iter().find_map(|c| workload::label(c, key));
                found.filter(|n| !n.is_empty())
            })
            .map(str::to_string)
    }
}

/// The value of env var `env_name` as the first container that sets it non-empty sees it (the
/// last entry of that name, as the kubelet reads it).
fn env_value(kind: WorkloadKind, object: &Value, env_name: &str) -> Option<String> {
    // A TrainJob's trainer env goes into its `node` container.
    let trainer = workload::runtime::settings(kind, object);
    workload::templates(kind, object)
        .into_iter()
        .filter_map(|(_, template)| workload::pod_spec(template))
        .flat_map(|spec| workload::containers(spec, &[]).map(|(_, c)| c))
        .chain(trainer)
        .find_map(|c| workload::effective_env_value(c, env_name).filter(|v| !v.is_empty()))
        .map(str::to_string)
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
    fn a_trainjob_names_its_queue_in_its_trainer_env() {
        let p = Policy::from_yaml(
            "defaultQueue: a\nmatch: {queueEnv: WANDB_LAUNCH_QUEUE_NAME}\nqueues:\n  a: {}\n  c: {}\n",
        )
        .unwrap();
        let tj = json!({"metadata": {"labels": {"wandb.ai/agent": "x"}},
            "spec": {"trainer": {"env": [{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "c"}]}}});
        let r = p.resolve_queue(WorkloadKind::TrainJob, &tj, None).unwrap();
        assert_eq!(r.queue.name, "c");
    }

    #[test]
    fn a_pytorchjob_takes_its_queue_from_its_replicas_in_name_order() {
        let p = Policy::from_yaml(
            "defaultQueue: a\nmatch: {queueEnv: WANDB_LAUNCH_QUEUE_NAME}\nqueues:\n  a: {}\n  b: {}\n  c: {}\n",
        )
        .unwrap();
        let template = |queue: &str| {
            json!({"metadata": {"labels": {"queue": queue}}, "spec": {"containers": [
                {"name": "c", "env": [{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": queue}]}]}})
        };
        // Written Worker first: the Master's queue still decides, by label and by env.
        let pt = json!({"spec": {"pytorchReplicaSpecs": {
            "Worker": {"template": template("b")}, "Master": {"template": template("c")}}}});
        let r = p
            .resolve_queue(WorkloadKind::PyTorchJob, &pt, None)
            .unwrap();
        assert_eq!(r.queue.name, "c");
        let mut by_env = pt.clone();
        for t in ["Worker", "Master"] {
            by_env["spec"]["pytorchReplicaSpecs"][t]["template"]["metadata"] = json!({});
        }
        let r = p
            .resolve_queue(WorkloadKind::PyTorchJob, &by_env, None)
            .unwrap();
        assert_eq!(r.queue.name, "c");
    }

    #[test]
    fn classify_by_labels_alone() {
        let p = policy();
        let pod = |labels: Value| json!({"metadata": {"labels": labels}, "spec": {}});
        assert_eq!(
            p.classify(WorkloadKind::Pod, &pod(json!({"wandb.ai/monitor": "true"}))),
            WorkloadMatch::Launch
        );
        assert_eq!(
            p.classify(WorkloadKind::Pod, &pod(json!({"launchgate.io/queue": "x"}))),
            WorkloadMatch::Launch
        );
        // The image-build label does not take a launch workload out of policy.
        assert_eq!(
            p.classify(
                WorkloadKind::Pod,
                &pod(json!({"wandb": "launch", "wandb.ai/monitor": "x"}))
            ),
            WorkloadMatch::Launch
        );
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
    fn a_generic_queue_label_names_the_queue_of_a_launch_workload_but_never_makes_one() {
        let p = policy();
        let job = |labels: Value, template: Value| {
            json!({"metadata": {"labels": labels},
                   "spec": {"template": {"metadata": {"labels": template}, "spec": {}}}})
        };
        // `queue` (and any other common label) alone, on the Job or its pod template: no
        // launch workload.
        for (labels, template) in [
            (json!({"queue": "c"}), json!({})),
            (json!({}), json!({"queue": "c"})),
            (
                json!({"queue": "c", "app": "etl", "team": "data"}),
                json!({"queue": "c"}),
            ),
        ] {
            let object = job(labels, template);
            assert_eq!(
                p.classify(WorkloadKind::BatchJob, &object),
                WorkloadMatch::NotLaunch,
                "{object}"
            );
            let c = p.queue("c").unwrap();
            assert!(!p.in_queue(WorkloadKind::BatchJob, &object, None, c));
        }
        // Marked by a launch label (on the Job or its template) or launchgate.io/queue, its
        // `queue` label names the queue, after launchgate.io/queue.
        for (labels, template, queue) in [
            (
                json!({"wandb.ai/monitor": "1", "queue": "c"}),
                json!({}),
                "c",
            ),
            (json!({"queue": "c"}), json!({"wandb.ai/agent": "x"}), "c"),
            (
                json!({"launchgate.io/queue": "b", "queue": "c"}),
                json!({}),
                "b",
            ),
            (
                json!({"launchgate.io/queue": "", "queue": "c"}),
                json!({}),
                "c",
            ),
        ] {
            let object = job(labels, template);
            assert_eq!(
                p.classify(WorkloadKind::BatchJob, &object),
                WorkloadMatch::Launch,
                "{object}"
            );
            let r = p
                .resolve_queue(WorkloadKind::BatchJob, &object, None)
                .unwrap();
            assert_eq!(r.queue.key, queue, "{object}");
            assert!(p.in_queue(WorkloadKind::BatchJob, &object, None, r.queue));
        }
        // The config that listed `queue` among the queue labels keeps its meaning, with a
        // warning; one that lists it as a launch label chose that and is not warned.
        let old = Policy::from_yaml(
            "defaultQueue: a\nmatch: {queueLabels: [launchgate.io/queue, queue]}\nqueues:\n  a: {}\n",
        )
        .unwrap();
        assert_eq!(
            old.classify(
                WorkloadKind::BatchJob,
                &job(json!({"queue": "a"}), json!({}))
            ),
            WorkloadMatch::Launch
        );
        let about_labels = |p: &Policy| -> Vec<String> {
            p.warnings
                .iter()
                .map(|w| w.to_string())
                .filter(|w| w.starts_with("match.queueLabels"))
                .collect()
        };
        let warned = about_labels(&old);
        assert!(
            warned.len() == 1
                && warned[0].starts_with("match.queueLabels[1]: \"queue\" has no prefix")
                && warned[0].contains("match.queueNameLabels"),
            "{warned:?}"
        );
        let chosen = Policy::from_yaml(
            "defaultQueue: a\nmatch: {launchLabels: [queue], queueLabels: [queue]}\nqueues:\n  a: {}\n",
        )
        .unwrap();
        assert!(about_labels(&chosen).is_empty(), "{:?}", chosen.warnings);
        assert!(about_labels(&p).is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn queues_are_keyed_by_entity_and_name() {
        let p = Policy::from_yaml(
            "defaultQueue: fallback\nqueues:\n  fallback: {}\n  gpu: {}\n  acme/gpu: {}\n  acme/only-acme: {}\n  beta/shared: {}\n  gamma/shared: {}\n",
        )
        .unwrap();
        let pod = |labels: Value, env: Value| json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "env": env}]}});
        let agent_env = |entity: &str, queue: &str| {
            json!([{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": queue},
                   {"name": "WANDB_LAUNCH_QUEUE_ENTITY", "value": entity}])
        };
        let key = |object: Value| {
            let r = p.resolve_queue(WorkloadKind::Pod, &object, None).unwrap();
            (r.queue.key.clone(), r.warning)
        };
        // The agent's env: entity/name wins over name.
        assert_eq!(key(pod(json!({}), agent_env("acme", "gpu"))).0, "acme/gpu");
        // Another entity's `gpu` falls back to the entity-less `gpu`.
        assert_eq!(key(pod(json!({}), agent_env("zeta", "gpu"))).0, "gpu");
        // The label names the queue, the env the entity.
        let env = json!([{"name": "WANDB_LAUNCH_QUEUE_ENTITY", "value": "acme"}]);
        assert_eq!(key(pod(json!({"queue": "gpu"}), env)).0, "acme/gpu");
        // Without an entity: the name alone, else the single entity/name.
        assert_eq!(key(pod(json!({"queue": "gpu"}), json!([]))).0, "gpu");
        assert_eq!(
            key(pod(json!({"queue": "only-acme"}), json!([]))).0,
            "acme/only-acme"
        );
        // Ambiguous without an entity, and unknown in an entity: the default, with a warning.
        let (k, warning) = key(pod(json!({"queue": "shared"}), json!([])));
        assert_eq!(k, "fallback");
        assert!(
            warning
                .unwrap()
                .message
                .contains(r#"queue "shared" is not configured"#)
        );
        let (k, warning) = key(pod(json!({}), agent_env("zeta", "only-acme")));
        assert_eq!(k, "fallback");
        assert!(
            warning
                .unwrap()
                .message
                .contains(r#"queue "zeta/only-acme" is not configured"#)
        );
        // The queue's name is the W&B name (it goes into the launchgate.io/queue label).
        let q = p.queue("acme/gpu").unwrap();
        assert_eq!(
            (q.name.as_str(), q.entity.as_deref()),
            ("gpu", Some("acme"))
        );
        for bad in ["a/b/c", "/gpu", "acme/"] {
            let err = Policy::from_yaml(&format!("queues:\n  {bad}: {{}}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("`entity/name`"), "{bad}: {err}");
        }
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
        assert_eq!(r.queue.name, "c", "the label wins");
        let env = json!([{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "b"}]);
        let r = p
            .resolve_queue(WorkloadKind::Pod, &with(json!({}), env), None)
            .unwrap();
        assert_eq!(r.queue.name, "b", "then the container env");
        let r = p
            .resolve_queue(
                WorkloadKind::Pod,
                &with(json!({}), json!([])),
                Some("teamb"),
            )
            .unwrap();
        assert_eq!(r.queue.name, "b", "then the namespace default");
        let r = p
            .resolve_queue(
                WorkloadKind::Pod,
                &with(json!({"queue": "zz"}), json!([])),
                None,
            )
            .unwrap();
        assert_eq!(r.queue.name, "a");
        assert!(r.warning.unwrap().message.contains("zz"));
        // The agent appended a second WANDB_LAUNCH_QUEUE_NAME: the last one is what runs.
        let env = json!([{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "c"},
                         {"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "b"}]);
        let r = p
            .resolve_queue(WorkloadKind::Pod, &with(json!({}), env), None)
            .unwrap();
        assert_eq!(r.queue.name, "b");
    }
}
