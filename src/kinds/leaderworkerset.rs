//! LeaderWorkerSet v1 (`leaderworkerset.x-k8s.io/v1`, the LWS controller): serving and
//! multi-host training groups that run until they are deleted.
//!
//! `spec.replicas` groups (its scale subresource writes it), each of
//! `spec.leaderWorkerTemplate.size` pods: one leader, from `leaderTemplate` — optional, the
//! leader runs from `workerTemplate` without one — and `size − 1` workers from
//! `workerTemplate`. During a rolling update up to `rolloutStrategy.rollingUpdateConfiguration
//! .maxSurge` groups run besides them. The controller makes a StatefulSet of the leaders and
//! one of each group's workers, and the StatefulSet controller makes the pods: a pod sent by it
//! from a StatefulSet labelled with the set's name is the set's, and only the LWS controller
//! may create or change such a StatefulSet. Kueue admits it by its labels, holding its pods by
//! scheduling gates: it has no suspend field.

use super::*;

/// The groups, as written (the CRD defaults an unset count to 1).
const GROUPS: Num = Num::object(&["spec", "replicas"], 1);

/// The pods of one group (the CRD defaults an unset size to 1: the leader alone).
static SIZE: Num = Num::holder(&["size"], 1);

/// The groups a rolling update may run besides `spec.replicas`: `maxSurge`, a number of groups
/// or a percentage of `spec.replicas` rounded up (the CRD's default is 0).
const SURGE: Num = Num::Scaled {
    from: From::Object,
    at: &[
        "spec",
        "rolloutStrategy",
        "rollingUpdateConfiguration",
        "maxSurge",
    ],
    of: &GROUPS,
    default: 0,
};

/// The most groups at once: `spec.replicas` + `maxSurge`.
const MOST_GROUPS: Num = Num::Add(&GROUPS, &SURGE);

/// The pods of a group that run from the worker template: every one but the leader when the
/// leader has its own template, else all of them.
static FROM_WORKER_TEMPLATE: Num = Num::If {
    when: Cond::Has {
        from: From::Holder,
        at: &["leaderTemplate"],
    },
    then: &FOLLOWERS,
    otherwise: &SIZE,
};
static FOLLOWERS: Num = Num::Sub(&SIZE, &Num::Lit(1));

/// The holder of both pod templates.
const GROUP: Holders = Holders::At(&["spec", "leaderWorkerTemplate"]);

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&LEADER_WORKER_SET];

pub static LEADER_WORKER_SET: KindSpec = KindSpec {
    name: "LeaderWorkerSet",
    group: "leaderworkerset.x-k8s.io",
    version: "v1",
    kind: "LeaderWorkerSet",
    resource: "leaderworkersets",
    signature: &["leaderWorkerTemplate"],
    positions: &[
        Position {
            role: "leader",
            holders: GROUP,
            template: &["leaderTemplate"],
            naming: Naming::None,
            replicas: GROUPS,
            at_most: MOST_GROUPS,
        },
        Position {
            role: "worker",
            holders: GROUP,
            template: &["workerTemplate"],
            naming: Naming::None,
            replicas: Num::Mul(&GROUPS, &FROM_WORKER_TEMPLATE),
            at_most: Num::Mul(&MOST_GROUPS, &FROM_WORKER_TEMPLATE),
        },
    ],
    run: Run {
        deadline: Deadline::Never {
            why: "a LeaderWorkerSet runs until it is deleted",
            set: "a bounded kind's deadline (a JobSet's or a Job's) for a run that should end",
        },
        ends: Ends::Never,
        ..Run::UNSTATED
    },
    // The LWS controller makes a StatefulSet of the leaders and one of each group's workers
    // (owned by the group's leader pod), the pod templates labelled with the set's name; the
    // StatefulSet controller makes the pods.
    makes: &[Makes {
        kind: "Pod",
        mark: &["leaderworkerset.sigs.k8s.io/name"],
        of: "name",
        through: Through::Owner(&STATEFUL_SET),
    }],
    // Its upstream install (`lws-system`).
    controller: &["system:serviceaccount:lws-system:lws-controller-manager"],
    webhook_rule: "leaderworkerset",
    scale: Some(Scale {
        replicas: &["spec", "replicas"],
        counts: "groups",
    }),
    // A Scale is judged against the LeaderWorkerSet it scales.
    watch: Watch::Every,
    kueue: Kueue::Gates,
    ..KindSpec::BASE
};

#[cfg(test)]
mod tests {
    use crate::workload::{WorkloadKind, templates};
    use serde_json::json;

    fn counts(object: &serde_json::Value) -> Vec<(String, i64, i64)> {
        let kind = WorkloadKind::named("LeaderWorkerSet").unwrap();
        templates(kind, object)
            .into_iter()
            .map(|(i, _)| (i.path().to_string(), i.replicas, i.at_most))
            .collect()
    }

    /// Each group is one leader and `size − 1` workers; a rolling update's surge groups count
    /// at most.
    #[test]
    fn groups_count_one_leader_and_size_less_one_workers() {
        let lws = json!({"spec": {
            "replicas": 3,
            "leaderWorkerTemplate": {
                "size": 4,
                "leaderTemplate": {"spec": {"containers": []}},
                "workerTemplate": {"spec": {"containers": []}}},
            "rolloutStrategy": {"rollingUpdateConfiguration": {"maxSurge": 1}}}});
        assert_eq!(
            counts(&lws),
            [
                ("spec.leaderWorkerTemplate.leaderTemplate".into(), 3, 4),
                ("spec.leaderWorkerTemplate.workerTemplate".into(), 9, 12),
            ]
        );
        // A percentage of the groups, rounded up: 34 % of 3 is 2 groups.
        let mut percent = lws.clone();
        percent["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"] = json!("34%");
        assert_eq!(
            counts(&percent),
            [
                ("spec.leaderWorkerTemplate.leaderTemplate".into(), 3, 5),
                ("spec.leaderWorkerTemplate.workerTemplate".into(), 9, 15),
            ]
        );
    }

    /// Without a leader template the leader runs from the worker template: every pod of the
    /// group does; the CRD's defaults (one group of one pod, no surge) count when unset.
    #[test]
    fn without_a_leader_template_every_pod_runs_from_the_worker_template() {
        let lws = json!({"spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 4,
                "workerTemplate": {"spec": {"containers": []}}}}});
        assert_eq!(
            counts(&lws),
            [("spec.leaderWorkerTemplate.workerTemplate".into(), 8, 8)]
        );
        let defaults = json!({"spec": {"leaderWorkerTemplate": {
            "leaderTemplate": {"spec": {}},
            "workerTemplate": {"spec": {}}}}});
        assert_eq!(
            counts(&defaults),
            [
                ("spec.leaderWorkerTemplate.leaderTemplate".into(), 1, 1),
                ("spec.leaderWorkerTemplate.workerTemplate".into(), 0, 0),
            ]
        );
    }
}
