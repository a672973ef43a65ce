//! batch/v1 Job: one pod template, `parallelism` pods at once (fewer when `completions` is
//! smaller).

use super::{Deadline, From, Holders, KindSpec, Kueue, Makes, Naming, Num, Position, Run};

static PARALLELISM: Num = Num::Int {
    from: From::Holder,
    at: &["parallelism"],
    default: 1,
};

static COMPLETIONS: Num = Num::Int {
    from: From::Holder,
    at: &["completions"],
    default: i64::MAX,
};

pub static JOB: KindSpec = KindSpec {
    name: "Job",
    group: "batch",
    version: "v1",
    kind: "Job",
    resource: "jobs",
    subresources: &[],
    signature: &[],
    positions: &[Position {
        role: "job",
        holders: Holders::At(&["spec"]),
        template: &["template"],
        naming: Naming::None,
        replicas: Num::Int {
            from: From::Holder,
            at: &["parallelism"],
            default: 1,
        },
        // API defaults: parallelism 1, completions = parallelism.
        at_most: Num::Min(&PARALLELISM, &COMPLETIONS),
    }],
    pods_from_runtime: false,
    run: Run {
        deadline: Deadline::Run(
            "/spec",
            "activeDeadlineSeconds",
            "spec.activeDeadlineSeconds",
        ),
    },
    // The Job's generated selector: every pod it selects carries the Job's uid.
    makes: &[Makes {
        kind: "Pod",
        mark: &["batch.kubernetes.io/controller-uid", "controller-uid"],
        of: "uid",
    }],
    // kube-controller-manager with --use-service-account-credentials (kubeadm, most
    // distributions), and without it.
    controller: &[
        "system:serviceaccount:kube-system:job-controller",
        "system:kube-controller-manager",
    ],
    kueue: Kueue::Suspends,
    native: Ok(()),
    webhook_rule: "jobs",
    pod_role: &[],
};
