//! kubeflow.org/v1 PyTorchJob (training-operator v1): a map of replica types, each a pod
//! template bound by its type name; an elastic job's Workers scale up to
//! `elasticPolicy.maxReplicas`.

use super::{
    Cond, Deadline, Ends, From, Holders, JobSpecs, KindSpec, Kueue, Makes, Naming, Num, Position,
    Replaces, RoleMark, Run, RunDefault, Setting,
};

static REPLICAS: Num = Num::Int {
    from: From::Holder,
    at: &["replicas"],
    default: 1,
};

static MAX_REPLICAS: Num = Num::Int {
    from: From::Object,
    at: &["spec", "elasticPolicy", "maxReplicas"],
    default: i64::MIN,
};

static ELASTIC_WORKERS: Num = Num::Max(&REPLICAS, &MAX_REPLICAS);

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&PYTORCH_JOB];

pub static PYTORCH_JOB: KindSpec = KindSpec {
    name: "PyTorchJob",
    group: "kubeflow.org",
    version: "v1",
    kind: "PyTorchJob",
    resource: "pytorchjobs",
    subresources: &[],
    signature: &["pytorchReplicaSpecs"],
    positions: &[Position {
        role: "replica type",
        holders: Holders::Keyed(&["spec", "pytorchReplicaSpecs"]),
        template: &["template"],
        naming: Naming::Key,
        replicas: Num::Int {
            from: From::Holder,
            at: &["replicas"],
            default: 1,
        },
        at_most: Num::If {
            when: Cond::KeyIs("worker"),
            then: &ELASTIC_WORKERS,
            otherwise: &REPLICAS,
        },
    }],
    pods_from_runtime: false,
    run: Run {
        deadline: Deadline::Run(
            "/spec/runPolicy",
            "activeDeadlineSeconds",
            "spec.runPolicy.activeDeadlineSeconds",
        ),
        defaults: &[
            RunDefault {
                setting: Setting::BackoffLimit,
                at: &["spec", "runPolicy", "backoffLimit"],
                replaces: Replaces::Absent,
                make: true,
                when: None,
                unless: None,
                misplaced: None,
            },
            RunDefault {
                setting: Setting::Ttl,
                at: &["spec", "runPolicy", "ttlSecondsAfterFinished"],
                replaces: Replaces::Absent,
                make: true,
                when: None,
                unless: None,
                // A common mistake (also in the W&B docs).
                misplaced: Some(&["spec", "ttlSecondsAfterFinished"]),
            },
        ],
        restarts: None,
        ends: Ends::WithRun,
    },
    makes: &[Makes {
        kind: "Pod",
        mark: &["training.kubeflow.org/job-name"],
        of: "name",
    }],
    controller: &["system:serviceaccount:kubeflow:training-operator"],
    kueue: Kueue::Suspends,
    native: Ok(()),
    role_marks: &[RoleMark::Label("training.kubeflow.org/replica-type")],
    job_specs: JobSpecs::None,
    shared_version: true,
    webhook_rule: "pytorchjob",
};
