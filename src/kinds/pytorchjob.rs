//! kubeflow.org/v1 PyTorchJob (training-operator v1): a map of replica types, each a pod
//! template bound by its type name; an elastic job's Workers scale up to
//! `elasticPolicy.maxReplicas`.

use super::{
    Carried, Cond, Deadline, From, Holders, KindSpec, Kueue, Makes, Naming, Num, Position, Run,
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
    },
    makes: &[Makes {
        kind: "Pod",
        mark: &["training.kubeflow.org/job-name"],
        of: "name",
    }],
    controller: &["system:serviceaccount:kubeflow:training-operator"],
    kueue: Kueue::Suspends,
    native: Ok(()),
    webhook_rule: "pytorchjob",
    pod_role: &[Carried::Label("training.kubeflow.org/replica-type")],
};
