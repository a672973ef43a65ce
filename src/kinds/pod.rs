//! core/v1 Pod: its own pod template.

use super::*;

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&POD];

pub static POD: KindSpec = KindSpec {
    name: "Pod",
    group: "",
    version: "v1",
    kind: "Pod",
    resource: "pods",
    subresources: &["ephemeralcontainers", "resize"],
    positions: &[Position {
        role: "pod",
        holders: Holders::Root,
        template: &[],
        naming: Naming::None,
        replicas: Num::Lit(1),
        at_most: Num::Lit(1),
    }],
    run: Run {
        deadline: Deadline::SPEC,
        ends: Ends::WithRun,
        ..Run::UNSTATED
    },
    kueue: Kueue::Pod,
    webhook_rule: "pods",
    ..KindSpec::BASE
};
