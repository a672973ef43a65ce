//! core/v1 Pod: its own pod template.

use super::{Deadline, Ends, Holders, JobSpecs, KindSpec, Kueue, Naming, Num, Position, Run};

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&POD];

pub static POD: KindSpec = KindSpec {
    name: "Pod",
    group: "",
    version: "v1",
    kind: "Pod",
    resource: "pods",
    subresources: &["ephemeralcontainers", "resize"],
    signature: &[],
    positions: &[Position {
        role: "pod",
        holders: Holders::Root,
        template: &[],
        naming: Naming::None,
        replicas: Num::Lit(1),
        at_most: Num::Lit(1),
    }],
    pods_from_runtime: false,
    run: Run {
        deadline: Deadline::Run(
            "/spec",
            "activeDeadlineSeconds",
            "spec.activeDeadlineSeconds",
        ),
        defaults: &[],
        restarts: None,
        ends: Ends::WithRun,
    },
    makes: &[],
    controller: &[],
    kueue: Kueue::Pod,
    native: Ok(()),
    role_marks: &[],
    job_specs: JobSpecs::None,
    shared_version: false,
    webhook_rule: "pods",
};
