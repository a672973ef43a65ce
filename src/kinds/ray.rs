//! KubeRay (`ray.io/v1`): a RayJob and the RayCluster it runs on.
//!
//! A RayJob describes its cluster in `spec.rayClusterSpec`: one head pod
//! (`headGroupSpec.template`) and worker groups (`workerGroupSpecs[*].template`, bound to a
//! queue template's group by `groupName`), each `replicas` × `numOfHosts` pods — up to
//! `maxReplicas` × `numOfHosts` when the cluster autoscales — and, in the default `K8sJobMode`,
//! a submitter pod (`spec.submitterPodTemplate`) that runs `ray job submit`. The KubeRay
//! operator makes the RayCluster (carrying the RayJob's labels) and the submitter Job, each
//! marked `ray.io/originated-from-cr-name: <RayJob>`; the RayCluster's pods carry
//! `ray.io/cluster: <RayCluster>`. A RayCluster a tenant creates directly is a launch workload
//! of its own. Ray Train sets up its own rendezvous: no PyTorch wiring.

use super::*;

/// The identities the KubeRay operator runs as that launchgate trusts unconfigured: none.
/// KubeRay's Helm chart runs it as `kuberay-operator` in the release's namespace, which
/// KubeRay's own instructions leave at `default` — a namespace tenants commonly hold, where
/// anyone who may create a pod can run it as that service account. There is no namespace to
/// assume, so the platform team names its operator's identity (`match.podCreators.RayJob` and
/// `.RayCluster`); until it does, what the operator makes is judged on every rule.
const KUBERAY: &[&str] = &[];

/// The label by which a pod KubeRay makes names its group (`headgroup` for the head).
const ROLE_MARKS: &[RoleMark] = &[RoleMark::Label("ray.io/group")];

/// The label KubeRay sets, on what it makes for a RayJob, to the RayJob's name.
const FROM_RAYJOB: &[&str] = &["ray.io/originated-from-cr-name"];

static REPLICAS: Num = Num::holder(&["replicas"], 0);

static MIN_REPLICAS: Num = Num::holder(&["minReplicas"], 0);

/// The CRD's default (2147483647): an autoscaling group without a maximum has none.
static MAX_REPLICAS: Num = Num::holder(&["maxReplicas"], 2147483647);

static HOSTS: Num = Num::holder(&["numOfHosts"], 1);

/// Without autoscaling KubeRay keeps `replicas` within `[minReplicas, maxReplicas]`.
static FIXED: Num = Num::Min(&AT_LEAST_MIN, &MAX_REPLICAS);
static AT_LEAST_MIN: Num = Num::Max(&REPLICAS, &MIN_REPLICAS);

static RAYJOB_GROUP_SIZE: Num = Num::If {
    when: Cond::True {
        from: From::Object,
        at: &["spec", "rayClusterSpec", "enableInTreeAutoscaling"],
    },
    then: &MAX_REPLICAS,
    otherwise: &FIXED,
};

static RAYCLUSTER_GROUP_SIZE: Num = Num::If {
    when: Cond::True {
        from: From::Object,
        at: &["spec", "enableInTreeAutoscaling"],
    },
    then: &MAX_REPLICAS,
    otherwise: &FIXED,
};

/// The field by which a RayJob's RayCluster ends with the job: without it (optional, false by
/// default in KubeRay) the operator keeps the cluster, and its GPUs, after the job ends or
/// reaches its deadline, until someone deletes it.
const SHUTDOWN: &[&str] = &["spec", "shutdownAfterJobFinishes"];

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&RAYJOB, &RAYCLUSTER];

pub static RAYJOB: KindSpec = KindSpec {
    name: "RayJob",
    group: "ray.io",
    version: "v1",
    kind: "RayJob",
    resource: "rayjobs",
    signature: &["rayClusterSpec", "entrypoint"],
    positions: &[
        Position {
            role: "head",
            holders: Holders::At(&["spec", "rayClusterSpec", "headGroupSpec"]),
            template: &["template"],
            naming: Naming::None,
            replicas: Num::Lit(1),
            at_most: Num::Lit(1),
        },
        Position {
            role: "worker group",
            holders: Holders::Each(&["spec", "rayClusterSpec", "workerGroupSpecs"]),
            template: &["template"],
            naming: Naming::Field("groupName"),
            replicas: Num::Mul(&REPLICAS, &HOSTS),
            at_most: Num::Mul(&RAYJOB_GROUP_SIZE, &HOSTS),
        },
        Position {
            role: "submitter",
            holders: Holders::At(&["spec", "submitterPodTemplate"]),
            template: &[],
            naming: Naming::None,
            replicas: Num::Lit(1),
            at_most: Num::Lit(1),
        },
    ],
    run: Run {
        // `spec.activeDeadlineSeconds` counts from the RayJob's start; each retry (up to
        // `backoffLimit`, on a new RayCluster) starts it afresh.
        deadline: Deadline::SPEC,
        // The cluster ends with the job only with `shutdownAfterJobFinishes: true`, written
        // first so the TTL it gates is written in the same pass; never over a
        // `deletionStrategy` (KubeRay rejects some of its modes with it). The CRD defaults
        // `backoffLimit` and `ttlSecondsAfterFinished` to 0 before admission.
        defaults: &[
            RunDefault {
                setting: Setting::EndWithRun,
                at: SHUTDOWN,
                unless: Some(Cond::Has {
                    from: From::Object,
                    at: &["spec", "deletionStrategy"],
                }),
                ..RunDefault::BASE
            },
            RunDefault {
                setting: Setting::BackoffLimit,
                at: &["spec", "backoffLimit"],
                replaces: Replaces::ApiDefault(0),
                ..RunDefault::BASE
            },
            // KubeRay deletes the cluster after the TTL only with shutdownAfterJobFinishes.
            RunDefault {
                setting: Setting::Ttl,
                at: &["spec", "ttlSecondsAfterFinished"],
                replaces: Replaces::ApiDefault(0),
                when: Some(Cond::True {
                    from: From::Object,
                    at: SHUTDOWN,
                }),
                ..RunDefault::BASE
            },
        ],
        restarts: Some(Restarts {
            at: &["spec", "backoffLimit"],
            dotted: "spec.backoffLimit",
            default: 0,
            zero_is_default: false,
            default_is: "the CRD's default",
            per_holder: None,
            uncounted: None,
        }),
        ends: Ends::When {
            cond: Cond::True {
                from: From::Object,
                at: SHUTDOWN,
            },
            keeps: "KubeRay keeps the RayJob's RayCluster, and its GPUs, after the job ends or reaches its deadline, until it is deleted",
        },
        ..Run::UNSTATED
    },
    makes: &[
        Makes {
            kind: "RayCluster",
            mark: FROM_RAYJOB,
            of: "name",
            through: Through::Direct,
        },
        Makes {
            kind: "Job",
            mark: FROM_RAYJOB,
            of: "name",
            through: Through::Direct,
        },
    ],
    controller: KUBERAY,
    role_marks: ROLE_MARKS,
    shared_version: true,
    webhook_rule: "rayjob",
    kueue: Kueue::Suspends("spec.suspend"),
    ..KindSpec::BASE
};

pub static RAYCLUSTER: KindSpec = KindSpec {
    name: "RayCluster",
    group: "ray.io",
    version: "v1",
    kind: "RayCluster",
    resource: "rayclusters",
    signature: &["headGroupSpec"],
    positions: &[
        Position {
            role: "head",
            holders: Holders::At(&["spec", "headGroupSpec"]),
            template: &["template"],
            naming: Naming::None,
            replicas: Num::Lit(1),
            at_most: Num::Lit(1),
        },
        Position {
            role: "worker group",
            holders: Holders::Each(&["spec", "workerGroupSpecs"]),
            template: &["template"],
            naming: Naming::Field("groupName"),
            replicas: Num::Mul(&REPLICAS, &HOSTS),
            at_most: Num::Mul(&RAYCLUSTER_GROUP_SIZE, &HOSTS),
        },
    ],
    run: Run {
        deadline: Deadline::Never {
            why: "a RayCluster runs until it is deleted",
            set: "a RayJob's spec.activeDeadlineSeconds, with spec.shutdownAfterJobFinishes: true (a RayJob runs its own RayCluster, which then ends with it)",
        },
        ends: Ends::Never,
        ..Run::UNSTATED
    },
    makes: &[Makes {
        kind: "Pod",
        mark: &["ray.io/cluster"],
        of: "name",
        through: Through::Direct,
    }],
    controller: KUBERAY,
    role_marks: ROLE_MARKS,
    shared_version: true,
    webhook_rule: "raycluster",
    kueue: Kueue::Suspends("spec.suspend"),
    ..KindSpec::BASE
};

#[cfg(test)]
mod tests {
    use crate::workload::{WorkloadKind, templates};
    use serde_json::json;

    #[test]
    fn a_rayjob_counts_its_groups_at_their_most() {
        let kind = WorkloadKind::named("RayJob").unwrap();
        let job = json!({"spec": {
            "rayClusterSpec": {
                "enableInTreeAutoscaling": true,
                "headGroupSpec": {"template": {"spec": {"containers": []}}},
                "workerGroupSpecs": [
                    {"groupName": "gpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 4,
                     "numOfHosts": 2, "template": {"spec": {"containers": []}}},
                    {"groupName": "cpu", "replicas": 3, "template": {"spec": {}}},
                    "junk"
                ]},
            "submitterPodTemplate": {"spec": {"containers": []}}}});
        let found: Vec<_> = templates(kind, &job)
            .into_iter()
            .map(|(i, _)| (i.path().to_string(), i.name.clone(), i.replicas, i.at_most))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "spec.rayClusterSpec.headGroupSpec.template".into(),
                    None,
                    1,
                    1
                ),
                (
                    "spec.rayClusterSpec.workerGroupSpecs[0].template".into(),
                    Some("gpu".into()),
                    2,
                    8
                ),
                (
                    "spec.rayClusterSpec.workerGroupSpecs[1].template".into(),
                    Some("cpu".into()),
                    3,
                    2147483647
                ),
                ("spec.submitterPodTemplate".into(), None, 1, 1),
            ]
        );
        // Without autoscaling a group runs replicas within [minReplicas, maxReplicas].
        let mut fixed = job.clone();
        fixed["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = json!(false);
        let at_most: Vec<i64> = templates(kind, &fixed)
            .into_iter()
            .map(|(i, _)| i.at_most)
            .collect();
        assert_eq!(at_most, [1, 2, 3, 1]);
    }
}
