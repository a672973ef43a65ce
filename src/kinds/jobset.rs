//! jobset.x-k8s.io/v1alpha2 JobSet: a list of replicated Jobs, each `replicas` Jobs of one
//! pod template, bound by its `name`. Its controller makes the Jobs; the Job controller makes
//! their pods.

use super::*;

static REPLICAS: Num = Num::holder(&["replicas"], 1);

static PARALLELISM: Num = Num::holder(&["template", "spec", "parallelism"], 1);

static COMPLETIONS: Num = Num::holder(&["template", "spec", "completions"], i64::MAX);

static AT_ONCE: Num = Num::Min(&PARALLELISM, &COMPLETIONS);

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&JOBSET];

pub static JOBSET: KindSpec = KindSpec {
    name: "JobSet",
    group: "jobset.x-k8s.io",
    version: "v1alpha2",
    kind: "JobSet",
    resource: "jobsets",
    signature: &["replicatedJobs"],
    positions: &[Position {
        role: "replicated job",
        holders: Holders::Each(&["spec", "replicatedJobs"]),
        template: &["template", "spec", "template"],
        naming: Naming::Field("name"),
        replicas: Num::Mul(&REPLICAS, &PARALLELISM),
        at_most: Num::Mul(&REPLICAS, &AT_ONCE),
    }],
    run: Run {
        deadline: Deadline::EachJob,
        defaults: &[
            RunDefault::of(Setting::Ttl, &["spec", "ttlSecondsAfterFinished"]),
            // How often the whole JobSet is restarted after a Job fails.
            RunDefault::made(
                Setting::BackoffLimit,
                &["spec", "failurePolicy", "maxRestarts"],
            ),
        ],
        restarts: Some(Restarts {
            at: &["spec", "failurePolicy", "maxRestarts"],
            dotted: "spec.failurePolicy.maxRestarts",
            default: 0,
            zero_is_default: false,
            default_is: "JobSet's default",
            per_holder: None,
            uncounted: Some(Uncounted {
                rules: &["spec", "failurePolicy", "rules"],
                dotted: "spec.failurePolicy.rules",
                action: "action",
                suffix: "AndIgnoreMaxRestarts",
                set: "spec.failurePolicy.rules (no action that ignores maxRestarts)",
            }),
        }),
        ends: Ends::WithRun,
        ..Run::UNSTATED
    },
    makes: &[Makes {
        kind: "Job",
        mark: &["jobset.sigs.k8s.io/jobset-uid"],
        of: "uid",
        through: Through::Direct,
    }],
    controller: &["system:serviceaccount:jobset-system:jobset-controller-manager"],
    role_marks: &[RoleMark::Label("jobset.sigs.k8s.io/replicatedjob-name")],
    job_specs: JobSpecs::Templates,
    webhook_rule: "jobset",
    kueue: Kueue::Suspends("spec.suspend"),
    ..KindSpec::BASE
};
