//! kubeflow.org/v1 PyTorchJob (training-operator v1): a map of replica types, each a pod
//! template bound by its type name; an elastic job's Workers scale up to
//! `elasticPolicy.maxReplicas`.

use super::*;

const REPLICAS: Num = Num::holder(&["replicas"], 1);

static MAX_REPLICAS: Num = Num::object(&["spec", "elasticPolicy", "maxReplicas"], i64::MIN);

static ELASTIC_WORKERS: Num = Num::Max(&REPLICAS, &MAX_REPLICAS);

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&PYTORCH_JOB];

pub static PYTORCH_JOB: KindSpec = KindSpec {
    name: "PyTorchJob",
    group: "kubeflow.org",
    version: "v1",
    kind: "PyTorchJob",
    resource: "pytorchjobs",
    signature: &["pytorchReplicaSpecs"],
    positions: &[Position {
        role: "replica type",
        holders: Holders::Keyed(&["spec", "pytorchReplicaSpecs"]),
        template: &["template"],
        naming: Naming::Key,
        replicas: REPLICAS,
        at_most: Num::If {
            when: Cond::KeyIs("worker"),
            then: &ELASTIC_WORKERS,
            otherwise: &REPLICAS,
        },
    }],
    run: Run {
        deadline: Deadline::RUN_POLICY,
        defaults: &[
            RunDefault::made(
                Setting::BackoffLimit,
                &["spec", "runPolicy", "backoffLimit"],
            ),
            RunDefault {
                setting: Setting::Ttl,
                at: &["spec", "runPolicy", "ttlSecondsAfterFinished"],
                make: true,
                // A common mistake (also in the W&B docs).
                misplaced: Some(&["spec", "ttlSecondsAfterFinished"]),
                ..RunDefault::BASE
            },
        ],
        pod_restarts: Some(PodRestarts {
            by: "the training operator",
            at: &["spec", "runPolicy", "backoffLimit"],
        }),
        ends: Ends::WithRun,
        ..Run::UNSTATED
    },
    makes: &[Makes {
        kind: "Pod",
        mark: &["training.kubeflow.org/job-name"],
        of: "name",
        through: Through::Direct,
    }],
    controller: &["system:serviceaccount:kubeflow:training-operator"],
    role_marks: &[RoleMark::Label("training.kubeflow.org/replica-type")],
    shared_version: true,
    webhook_rule: "pytorchjob",
    gang: Some(Gang {
        at: &["spec", "runPolicy", "schedulingPolicy", "minAvailable"],
        when: None,
    }),
    scale: Some(Scale {
        replicas: &["spec", "pytorchReplicaSpecs", "Worker", "replicas"],
        counts: "Worker replicas",
    }),
    watch: Watch::Every,
    kueue: Kueue::Suspends("spec.runPolicy.suspend"),
    ..KindSpec::BASE
};
