//! batch.volcano.sh/v1alpha1 Job: a list of tasks, each a pod template bound by its `name`.

use super::{Carried, Deadline, From, Holders, KindSpec, Kueue, Makes, Naming, Num, Position, Run};

pub static VOLCANO_JOB: KindSpec = KindSpec {
    name: "VolcanoJob",
    group: "batch.volcano.sh",
    version: "v1alpha1",
    kind: "Job",
    resource: "jobs",
    subresources: &[],
    signature: &["tasks"],
    positions: &[Position {
        role: "task",
        holders: Holders::Each(&["spec", "tasks"]),
        template: &["template"],
        naming: Naming::Field("name"),
        replicas: Num::Int {
            from: From::Holder,
            at: &["replicas"],
            default: 1,
        },
        at_most: Num::Int {
            from: From::Holder,
            at: &["replicas"],
            default: 1,
        },
    }],
    pods_from_runtime: false,
    run: Run {
        deadline: Deadline::EachPod,
    },
    makes: &[Makes {
        kind: "Pod",
        mark: &["volcano.sh/job-name"],
        of: "name",
    }],
    controller: &["system:serviceaccount:volcano-system:volcano-controllers"],
    kueue: Kueue::No("Kueue does not manage Volcano Jobs (Volcano's scheduler queues them)"),
    native: Ok(()),
    webhook_rule: "volcano",
    pod_role: &[
        Carried::Label("volcano.sh/task-spec"),
        Carried::Annotation("volcano.sh/task-spec"),
    ],
};
