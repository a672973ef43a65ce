//! batch.volcano.sh/v1alpha1 Job: a list of tasks, each a pod template bound by its `name`.

use super::*;

const REPLICAS: Num = Num::holder(&["replicas"], 1);

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&VOLCANO_JOB];

pub static VOLCANO_JOB: KindSpec = KindSpec {
    name: "VolcanoJob",
    group: "batch.volcano.sh",
    version: "v1alpha1",
    kind: "Job",
    resource: "jobs",
    signature: &["tasks"],
    positions: &[Position {
        role: "task",
        holders: Holders::Each(&["spec", "tasks"]),
        template: &["template"],
        naming: Naming::Field("name"),
        replicas: REPLICAS,
        at_most: REPLICAS,
    }],
    run: Run {
        deadline: Deadline::EachPod,
        defaults: &[
            RunDefault::of(Setting::Ttl, &["spec", "ttlSecondsAfterFinished"]),
            // Volcano treats `maxRetry: 0` as unset (its webhook writes 3), and its CRD's schema
            // writes `maxRetry: 3` before any webhook where the user wrote none.
            RunDefault {
                setting: Setting::VolcanoMaxRetry,
                at: &["spec", "maxRetry"],
                replaces: Replaces::ValueOrApiDefault { unset: 0, api: 3 },
                ..RunDefault::BASE
            },
        ],
        restarts: Some(Restarts {
            at: &["spec", "maxRetry"],
            dotted: "spec.maxRetry",
            default: 3,
            zero_is_default: true,
            default_is: "Volcano's default",
            per_holder: Some("maxRetry"),
            uncounted: None,
        }),
        ends: Ends::WithRun,
        ..Run::UNSTATED
    },
    makes: &[Makes {
        kind: "Pod",
        mark: &["volcano.sh/job-name"],
        of: "name",
        through: Through::Direct,
    }],
    controller: &["system:serviceaccount:volcano-system:volcano-controllers"],
    kueue: Kueue::No("Kueue does not manage Volcano Jobs (Volcano's scheduler queues them)"),
    role_marks: &[
        RoleMark::Label("volcano.sh/task-spec"),
        RoleMark::Annotation("volcano.sh/task-spec"),
    ],
    webhook_rule: "volcano",
    gang: Some(Gang {
        at: &["spec", "minAvailable"],
        when: Some(Cond::Has {
            from: From::Object,
            at: &["spec", "plugins", "pytorch"],
        }),
    }),
    watch: Watch::Selected,
    ..KindSpec::BASE
};
