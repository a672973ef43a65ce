//! batch.volcano.sh/v1alpha1 Job: a list of tasks, each a pod template bound by its `name`.

use super::{
    Deadline, Ends, From, Holders, JobSpecs, KindSpec, Kueue, Makes, Naming, Num, Position,
    Replaces, Restarts, RoleMark, Run, RunDefault, Setting,
};

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&VOLCANO_JOB];

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
        defaults: &[
            RunDefault {
                setting: Setting::Ttl,
                at: &["spec", "ttlSecondsAfterFinished"],
                replaces: Replaces::Absent,
                make: false,
                when: None,
                unless: None,
                misplaced: None,
            },
            // Volcano treats `maxRetry: 0` as unset (its webhook writes 3).
            RunDefault {
                setting: Setting::VolcanoMaxRetry,
                at: &["spec", "maxRetry"],
                replaces: Replaces::Value(0),
                make: false,
                when: None,
                unless: None,
                misplaced: None,
            },
        ],
        restarts: Some(Restarts {
            at: &["spec", "maxRetry"],
            dotted: "spec.maxRetry",
            default: 3,
            zero_is_default: true,
            default_is: "Volcano's default",
            per_holder: Some("maxRetry"),
        }),
        ends: Ends::WithRun,
    },
    makes: &[Makes {
        kind: "Pod",
        mark: &["volcano.sh/job-name"],
        of: "name",
    }],
    controller: &["system:serviceaccount:volcano-system:volcano-controllers"],
    kueue: Kueue::No("Kueue does not manage Volcano Jobs (Volcano's scheduler queues them)"),
    native: Ok(()),
    role_marks: &[
        RoleMark::Label("volcano.sh/task-spec"),
        RoleMark::Annotation("volcano.sh/task-spec"),
    ],
    job_specs: JobSpecs::None,
    shared_version: false,
    webhook_rule: "volcano",
};
