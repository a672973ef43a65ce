//! core/v1 Pod: its own pod template.

use super::{Deadline, Holders, KindSpec, Kueue, Naming, Num, Position, Run};

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
    },
    makes: &[],
    controller: &[],
    kueue: Kueue::Pod,
    native: Ok(()),
    webhook_rule: "pods",
    pod_role: &[],
};
