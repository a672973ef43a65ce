//! Kubeflow MPIJob v2 (`kubeflow.org/v2beta1`, mpi-operator v0.8): Horovod and DeepSpeed runs
//! launched with `mpirun`.
//!
//! `spec.mpiReplicaSpecs` maps a replica type to a replica spec (`replicas`, `template`): one
//! `Launcher` and `Worker` pods, bound to a queue template's replica spec of the same type. The
//! operator makes the launcher as a batch/v1 Job `<name>-launcher` (labelled `app: <MPIJob>`,
//! carrying `runPolicy`'s `backoffLimit`, `activeDeadlineSeconds` and
//! `ttlSecondsAfterFinished`) and each worker as a Pod `<name>-worker-<i>` (labelled
//! `training.kubeflow.org/job-name: <MPIJob>`, `training.kubeflow.org/job-role: worker` and
//! `training.kubeflow.org/replica-index`), both with the MPIJob as their controller; the
//! launcher's pods carry `training.kubeflow.org/job-role: launcher`. `mpirun` wires the ranks
//! over SSH: no PyTorch wiring. Kueue admits it by `spec.runPolicy.suspend`.
//!
//! The workers run `sshd` until they are deleted: the operator deletes them when the run ends
//! only with `spec.runPolicy.cleanPodPolicy` `Running` or `All`; unset, it defaults it to
//! `None` and keeps them (see [`MPIJOB`]'s `run.ends`).

use super::*;

/// The identities the mpi-operator runs as: its standalone install
/// (`deploy/v2beta1/mpi-operator.yaml`, namespace `mpi-operator`) and its Kubeflow overlay
/// (namespace `kubeflow`).
const MPI_OPERATOR: &[&str] = &[
    "system:serviceaccount:mpi-operator:mpi-operator",
    "system:serviceaccount:kubeflow:mpi-operator",
];

/// The operator defaults an unset `replicas` to 1 for the launcher, 0 for the workers (and
/// refuses a launcher of any other count).
const REPLICAS: Num = Num::If {
    when: Cond::KeyIs("Launcher"),
    then: &Num::holder(&["replicas"], 1),
    otherwise: &Num::holder(&["replicas"], 0),
};

/// Which pods the operator deletes when the run ends.
const CLEAN_POD_POLICY: &[&str] = &["spec", "runPolicy", "cleanPodPolicy"];

/// The workers end with the run (`Running` deletes the pods still running, `All` every pod).
const CLEANS_UP: Cond = Cond::OneOf {
    from: From::Object,
    at: CLEAN_POD_POLICY,
    any_of: &["Running", "All"],
};

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&MPIJOB];

pub static MPIJOB: KindSpec = KindSpec {
    name: "MPIJob",
    group: "kubeflow.org",
    version: "v2beta1",
    kind: "MPIJob",
    resource: "mpijobs",
    signature: &["mpiReplicaSpecs"],
    positions: &[Position {
        role: "replica type",
        holders: Holders::Keyed(&["spec", "mpiReplicaSpecs"]),
        template: &["template"],
        naming: Naming::Key,
        replicas: REPLICAS,
        at_most: REPLICAS,
    }],
    run: Run {
        // Written to the launcher Job, whose deadline counts across its retries.
        deadline: Deadline::RUN_POLICY,
        // The CRD defaults none of these (only `runPolicy.suspend`, where `runPolicy` is
        // written); the operator passes them to the launcher Job as they are.
        defaults: &[
            // Written first, so the workers end with the run.
            RunDefault::made(Setting::EndWithRun, CLEAN_POD_POLICY),
            RunDefault::made(
                Setting::BackoffLimit,
                &["spec", "runPolicy", "backoffLimit"],
            ),
            // Deletes the launcher Job; the MPIJob and its workers stay.
            RunDefault::made(
                Setting::Ttl,
                &["spec", "runPolicy", "ttlSecondsAfterFinished"],
            ),
        ],
        // The operator deletes the workers when the run ends only with `cleanPodPolicy`
        // `Running` or `All`; unset, it defaults it to `None` and keeps them.
        ends: Ends::When {
            cond: CLEANS_UP,
            keeps: "the mpi-operator keeps the MPIJob's worker pods, and their GPUs, after the run ends or reaches its deadline, until the MPIJob is deleted",
        },
        ..Run::UNSTATED
    },
    makes: &[
        Makes {
            kind: "Pod",
            mark: &["training.kubeflow.org/job-name"],
            of: "name",
            through: Through::Direct,
        },
        Makes {
            kind: "Job",
            mark: &["app"],
            of: "name",
            through: Through::Direct,
        },
    ],
    controller: MPI_OPERATOR,
    // `launcher` or `worker`, bound to the replica type case-insensitively.
    role_marks: &[RoleMark::Label("training.kubeflow.org/job-role")],
    webhook_rule: "mpijob",
    // The operator defaults `minAvailable` to workers + 1 (the launcher): every pod.
    gang: Some(Gang {
        at: &["spec", "runPolicy", "schedulingPolicy", "minAvailable"],
        when: None,
    }),
    // kubeflow.org/v2beta1 serves only the MPIJob (the training operator's MPIJob is v1), so
    // `shared_version` stays false; the CRD has no scale subresource.
    kueue: Kueue::Suspends("spec.runPolicy.suspend"),
    ..KindSpec::BASE
};

#[cfg(test)]
mod tests {
    use crate::admission::AdmissionRequest;
    use crate::cluster::NoCluster;
    use crate::review::{Decision, Endpoint, decide};
    use crate::workload::{WorkloadKind, templates};
    use serde_json::{Value, json};

    const OPERATOR: &str = "system:serviceaccount:mpi-operator:mpi-operator";

    /// A queue whose template is an MPIJob: a CPU launcher, up to 4 workers of up to 4 GPUs.
    fn policy() -> crate::Policy {
        crate::Policy::from_yaml(
            r#"
queues:
  q:
    limits:
      enforcement: deny
      template: |
        apiVersion: kubeflow.org/v2beta1
        kind: MPIJob
        spec:
          mpiReplicaSpecs:
            Launcher:
              replicas: 1
              template:
                spec:
                  containers:
                    - resources: {limits: {nvidia.com/gpu: '{{launcher_gpus}}'}}
            Worker:
              replicas: '{{workers}}'
              template:
                spec:
                  containers:
                    - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}
      variables:
        launcher_gpus: {type: integer, minimum: 0, maximum: 0}
        workers: {type: integer, minimum: 1, maximum: 4}
        gpus: {type: integer, minimum: 0, maximum: 4}
defaultQueue: q
"#,
        )
        .unwrap()
    }

    fn ask(object: Value, user: &str) -> Decision {
        let mut request = AdmissionRequest::synthetic_create(object, Some("research")).unwrap();
        request.user_info = Some(json!({"username": user, "groups": ["system:authenticated"]}));
        decide(&policy(), Endpoint::Validate, &request, &NoCluster)
    }

    fn message(d: &Decision) -> &str {
        d.response
            .status
            .as_ref()
            .map_or("", |s| s.message.as_str())
    }

    /// An MPIJob of `workers` workers of `gpus` GPUs each, with `launcher_gpus` on the launcher.
    fn launch(workers: i64, gpus: i64, launcher_gpus: i64) -> Value {
        let container = |name: &str, gpus: i64| {
            json!({"name": name, "image": "mpioperator/mpi-pi:openmpi",
                   "resources": {"limits": {"nvidia.com/gpu": gpus}}})
        };
        json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "pi", "labels": {"wandb.ai/monitor": "true"}},
            "spec": {"mpiReplicaSpecs": {
                "Launcher": {"replicas": 1,
                    "template": {"spec": {"containers": [container("launcher", launcher_gpus)]}}},
                "Worker": {"replicas": workers,
                    "template": {"spec": {"containers": [container("worker", gpus)]}}}}}})
    }

    /// A worker pod the operator makes for MPIJob `pi`, with `gpus` GPUs, labelled `role`.
    fn operator_pod(role: &str, gpus: i64) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pi-worker-0", "labels": {
                "wandb.ai/monitor": "true",
                "training.kubeflow.org/operator-name": "mpi-operator",
                "training.kubeflow.org/job-name": "pi",
                "training.kubeflow.org/job-role": role,
                "training.kubeflow.org/replica-index": "0"},
                "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                    "name": "pi", "uid": "u-1", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "worker",
                "image": "mpioperator/mpi-pi:openmpi",
                "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}})
    }

    fn mpijob(workers: Option<i64>) -> Value {
        let mut worker = json!({"template": {"spec": {"containers": [{"name": "w"}]}}});
        if let Some(n) = workers {
            worker["replicas"] = json!(n);
        }
        json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
            "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
                "Worker": worker,
                "Launcher": {"template": {"spec": {"containers": [{"name": "l"}]}}}}}})
    }

    #[test]
    fn the_walk_counts_the_launcher_and_the_workers() {
        let kind = WorkloadKind::named("MPIJob").unwrap();
        assert_eq!(
            WorkloadKind::of_object(&mpijob(None)),
            Some(kind),
            "recognised by its apiVersion and kind"
        );
        let found: Vec<_> = templates(kind, &mpijob(Some(3)))
            .into_iter()
            .map(|(i, _)| (i.path().to_string(), i.name.clone(), i.replicas, i.at_most))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "spec.mpiReplicaSpecs.Launcher.template".into(),
                    Some("Launcher".into()),
                    1,
                    1
                ),
                (
                    "spec.mpiReplicaSpecs.Worker.template".into(),
                    Some("Worker".into()),
                    3,
                    3
                ),
            ]
        );
        // Unset, the operator runs one launcher and no workers.
        let counts: Vec<i64> = templates(kind, &mpijob(None))
            .into_iter()
            .map(|(i, _)| i.replicas)
            .collect();
        assert_eq!(counts, [1, 0]);
    }

    /// A queue template is an MPIJob by its kind, its apiVersion (v2beta1 serves no other
    /// kind) or its `spec.mpiReplicaSpecs`; the training operator's v1 MPIJob is not one. It
    /// shares its group with the PyTorchJob, so each is told by its `kind` too.
    #[test]
    fn a_template_is_told_an_mpijob_and_its_group_is_shared() {
        use crate::validate::template::infer_kind;
        let kind = WorkloadKind::named("MPIJob").unwrap();
        for template in [
            json!({"kind": "MPIJob"}),
            json!({"apiVersion": "kubeflow.org/v2beta1"}),
            json!({"spec": {"mpiReplicaSpecs": {}}}),
        ] {
            assert_eq!(infer_kind(&template), Ok(kind), "{template}");
        }
        assert!(infer_kind(&json!({"apiVersion": "kubeflow.org/v1", "kind": "MPIJob"})).is_err());
        assert_eq!(
            kind.cel_test(),
            "(request.kind.group == 'kubeflow.org' && request.kind.kind == 'MPIJob')"
        );
        assert_eq!(
            WorkloadKind::PyTorchJob.cel_test(),
            "(request.kind.group == 'kubeflow.org' && request.kind.kind == 'PyTorchJob')"
        );
    }

    /// The built-in queue writes the run defaults under `spec.runPolicy` (made where absent:
    /// the workers end with the run, then retries and the TTL),
    /// hardens both replica types, writes no PyTorch env, and has nothing more to write after.
    #[test]
    fn the_run_defaults_go_under_the_run_policy() {
        let policy = crate::Policy::from_yaml(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
        let mutate = |object: &Value| {
            let request = AdmissionRequest::synthetic_create(object.clone(), Some("ml")).unwrap();
            decide(&policy, Endpoint::Mutate, &request, &NoCluster)
        };
        let job = launch(2, 1, 0);
        let first = mutate(&job);
        assert!(first.response.allowed);
        let mut mutated = job.clone();
        json_patch::patch(&mut mutated, &first.patch).unwrap();
        let spec = &mutated["spec"];
        assert_eq!(
            spec["runPolicy"],
            json!({"cleanPodPolicy": "Running", "backoffLimit": 0, "ttlSecondsAfterFinished": 60})
        );
        for role in ["Launcher", "Worker"] {
            let c = &spec["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0];
            assert_eq!(
                c["securityContext"]["allowPrivilegeEscalation"], false,
                "{role}"
            );
            let env = c["env"].as_array().into_iter().flatten();
            assert!(
                env.clone()
                    .all(|e| e["name"] != "MASTER_ADDR" && e["name"] != "WORLD_SIZE"),
                "{role}: {c}"
            );
        }
        assert!(mutate(&mutated).patch.0.is_empty());
        // Written values stay.
        let mut kept = job.clone();
        kept["spec"]["runPolicy"] = json!({"backoffLimit": 3, "cleanPodPolicy": "Running"});
        let mut out = kept.clone();
        json_patch::patch(&mut out, &mutate(&kept).patch).unwrap();
        assert_eq!(
            out["spec"]["runPolicy"],
            json!({"backoffLimit": 3, "cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60})
        );
    }

    /// A queue template's replica spec binds to the MPIJob's of the same type: the launcher is
    /// held to the Launcher's bounds, the workers to the Worker's.
    #[test]
    fn a_queue_template_binds_by_replica_type() {
        let ok = ask(launch(4, 4, 0), "alice");
        assert!(ok.response.allowed, "{}", message(&ok));
        let gpu_launcher = ask(launch(2, 1, 1), "alice");
        assert!(!gpu_launcher.response.allowed);
        assert!(
            message(&gpu_launcher).contains("spec.mpiReplicaSpecs.Launcher.template"),
            "{}",
            message(&gpu_launcher)
        );
        let big_worker = ask(launch(2, 8, 0), "alice");
        assert!(
            message(&big_worker).contains("spec.mpiReplicaSpecs.Worker.template")
                && !message(&big_worker).contains("Launcher"),
            "{}",
            message(&big_worker)
        );
        let many = ask(launch(5, 1, 0), "alice");
        assert!(
            message(&many).contains("spec.mpiReplicaSpecs.Worker.replicas"),
            "{}",
            message(&many)
        );
        // The map key binds case-insensitively, as the operator's pods name their role.
        let mut lower = launch(2, 1, 1);
        let specs = lower["spec"]["mpiReplicaSpecs"].as_object_mut().unwrap();
        let launcher = specs.remove("Launcher").unwrap();
        specs.insert("launcher".into(), launcher);
        assert!(!ask(lower, "alice").response.allowed);
    }

    /// The operator's pods are judged per pod, each bound to its role by
    /// `training.kubeflow.org/job-role`; the same pod from a tenant is judged as a bare pod.
    #[test]
    fn the_operators_pods_bind_by_their_role() {
        let worker = ask(operator_pod("worker", 4), OPERATOR);
        assert!(worker.response.allowed, "{}", message(&worker));
        let launcher = ask(operator_pod("launcher", 4), OPERATOR);
        assert!(!launcher.response.allowed, "a 4-GPU launcher pod");
        assert!(
            message(&launcher).contains("exceeds maximum 0"),
            "{}",
            message(&launcher)
        );
        let forged = ask(operator_pod("worker", 4), "alice");
        assert!(
            forged
                .response
                .warnings
                .iter()
                .any(|w| w.contains("names MPIJob \"pi\" as its controller")),
            "{:?}",
            forged.response.warnings
        );
    }

    /// The launcher Job the operator makes for MPIJob `pi`: its pod template carries the
    /// launcher's role, with `gpus` GPUs.
    fn launcher_job(gpus: i64) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi-launcher", "labels": {"app": "pi"},
                "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                    "name": "pi", "uid": "u-1", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": {"wandb.ai/monitor": "true",
                    "training.kubeflow.org/operator-name": "mpi-operator",
                    "training.kubeflow.org/job-name": "pi",
                    "training.kubeflow.org/job-role": "launcher"}},
                "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "launcher",
                    "image": "mpioperator/mpi-pi:openmpi",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}})
    }

    /// The operator's launcher Job is verified (no warning) and judged per pod; its pods, made
    /// by the Job controller, carry the launcher's role and are bound to it.
    #[test]
    fn the_operators_launcher_job_is_verified() {
        let job = ask(launcher_job(0), OPERATOR);
        assert!(job.response.allowed, "{}", message(&job));
        assert!(
            job.response.warnings.is_empty(),
            "{:?}",
            job.response.warnings
        );
        let mut pod = operator_pod("launcher", 1);
        pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = json!("j-1");
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
            "name": "pi-launcher", "uid": "j-1", "controller": true}]);
        let launcher_pod = ask(pod, "system:serviceaccount:kube-system:job-controller");
        assert!(
            message(&launcher_pod).contains("exceeds maximum 0"),
            "{}",
            message(&launcher_pod)
        );
    }

    /// A child workload's pod template is bound by the role mark its controller writes there,
    /// as a pod is: a launcher Job over the Launcher's bounds is refused at the Job, not only
    /// at its pods (which the Job controller would retry).
    #[test]
    fn the_operators_launcher_job_is_bound_to_the_launcher() {
        let gpu = ask(launcher_job(1), OPERATOR);
        assert!(!gpu.response.allowed, "a 1-GPU launcher Job");
    }

    /// The workers hold their GPUs past the run's deadline unless `runPolicy.cleanPodPolicy` is
    /// `Running` or `All`: the GPU-hour ceiling should count such a run as outliving its
    /// deadline, and one that cleans up as bounded by it.
    #[test]
    fn workers_outlive_the_run_without_a_cleanup_policy() {
        use crate::topology::guardrails::{RunLength, run_length};
        let kind = WorkloadKind::named("MPIJob").unwrap();
        let mut job = launch(2, 1, 0);
        job["spec"]["runPolicy"] = json!({"activeDeadlineSeconds": 600});
        assert!(matches!(run_length(kind, &job), RunLength::Outlives { .. }));
        job["spec"]["runPolicy"]["cleanPodPolicy"] = json!("None");
        assert!(matches!(run_length(kind, &job), RunLength::Outlives { .. }));
        job["spec"]["runPolicy"]["cleanPodPolicy"] = json!("Running");
        assert!(matches!(run_length(kind, &job), RunLength::Bounded(_)));
    }
}
