//! batch/v1 Job: one pod template, `parallelism` pods at once (fewer when `completions` is
//! smaller).

use super::*;

const PARALLELISM: Num = Num::holder(&["parallelism"], 1);

static COMPLETIONS: Num = Num::holder(&["completions"], i64::MAX);

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&JOB];

pub static JOB: KindSpec = KindSpec {
    name: "Job",
    group: "batch",
    version: "v1",
    kind: "Job",
    resource: "jobs",
    positions: &[Position {
        role: "job",
        holders: Holders::At(&["spec"]),
        template: &["template"],
        naming: Naming::None,
        replicas: PARALLELISM,
        // API defaults: parallelism 1, completions = parallelism.
        at_most: Num::Min(&PARALLELISM, &COMPLETIONS),
    }],
    run: Run {
        deadline: Deadline::SPEC,
        defaults: &[
            RunDefault {
                setting: Setting::BackoffLimit,
                at: &["spec", "backoffLimit"],
                replaces: Replaces::ApiDefault(6),
                // With backoffLimitPerIndex the API default is different and meaningful.
                unless: Some(Cond::Has {
                    from: From::Object,
                    at: &["spec", "backoffLimitPerIndex"],
                }),
                ..RunDefault::BASE
            },
            RunDefault::of(Setting::Ttl, &["spec", "ttlSecondsAfterFinished"]),
            // "Always" is what pod defaulting fills in and is invalid for a Job.
            RunDefault {
                setting: Setting::RestartPolicy,
                at: &["spec", "template", "spec", "restartPolicy"],
                replaces: Replaces::Text("Always"),
                ..RunDefault::BASE
            },
        ],
        ends: Ends::WithRun,
        ..Run::UNSTATED
    },
    // The Job's generated selector: every pod it selects carries the Job's uid.
    makes: &[Makes {
        kind: "Pod",
        mark: &["batch.kubernetes.io/controller-uid", "controller-uid"],
        of: "uid",
        through: Through::Direct,
    }],
    // kube-controller-manager with --use-service-account-credentials (kubeadm, most
    // distributions), and without it.
    controller: &[
        "system:serviceaccount:kube-system:job-controller",
        "system:kube-controller-manager",
    ],
    job_specs: JobSpecs::Object,
    webhook_rule: "jobs",
    // W&B Launch's default Kubernetes resource.
    launch_default: true,
    kueue: Kueue::Suspends("spec.suspend"),
    ..KindSpec::BASE
};
