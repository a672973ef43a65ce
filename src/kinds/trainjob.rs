//! trainer.kubeflow.org/v1alpha1 TrainJob (Kubeflow Trainer v2): no pod template of its own;
//! its pods come from the (Cluster)TrainingRuntime it names, with `spec.trainer` applied to the
//! runtime's `node` container. Trainer makes a JobSet named after it.

use super::*;

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&TRAIN_JOB];

pub static TRAIN_JOB: KindSpec = KindSpec {
    name: "TrainJob",
    group: "trainer.kubeflow.org",
    version: "v1alpha1",
    kind: "TrainJob",
    resource: "trainjobs",
    signature: &["runtimeRef", "trainer"],
    positions: &[],
    pods_from_runtime: true,
    run: Run {
        deadline: Deadline::Run(
            "/spec",
            "activeDeadlineSeconds",
            "spec.activeDeadlineSeconds",
        ),
        ..Run::BASE
    },
    // Trainer names a TrainJob's JobSet after the TrainJob.
    makes: &[Makes {
        kind: "JobSet",
        mark: &[OWN_NAME],
        of: "name",
    }],
    controller: &["system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"],
    native: Err(
        "a TrainJob's pods come from its training runtime: its size and node container are read from the runtime (cluster lookups), its own runtimePatches are judged as pod specs, and launchgate writes its defaults into a runtime patch whose shape depends on the runtime",
    ),
    webhook_rule: "trainjob",
    watch: Watch::Every,
    ..KindSpec::BASE
};
