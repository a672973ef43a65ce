//! trainer.kubeflow.org/v1alpha1 TrainJob (Kubeflow Trainer v2): no pod template of its own;
//! its pods come from the (Cluster)TrainingRuntime it names, with `spec.trainer` applied to the
//! runtime's `node` container. Trainer makes a JobSet named after it.

use super::*;

/// The label by which Trainer finds a runtime's trainer step.
const ANCESTOR_STEP: &str = "trainer.kubeflow.org/trainjob-ancestor-step";

/// The API group and version of TrainJobs and of the runtimes they name.
pub const GROUP: &str = "trainer.kubeflow.org";
pub const VERSION: &str = "v1alpha1";

/// Where a TrainJob names its runtime, the runtime kinds, and what the runtime contributes.
pub const RUNTIME: RuntimeSpec = RuntimeSpec {
    reference: &["spec", "runtimeRef"],
    cluster: "ClusterTrainingRuntime",
    namespaced: "TrainingRuntime",
    // Trainer builds the JobSet from the runtime's `spec.template`.
    renders: &["spec", "template"],
    step: &["template", "metadata", "labels", ANCESTOR_STEP],
    step_is: "trainer",
    // Trainer's `constants.Node`.
    node: "node",
    settings: &["spec", "trainer"],
    nodes: "numNodes",
    runtime_nodes: &["spec", "mlPolicy", "numNodes"],
    default_nodes: 1,
    job: &["template", "spec"],
    nodes_at: &["parallelism", "completions"],
    resources: "resourcesPerNode",
    image: "image",
    env: "env",
    patches: &["spec", "runtimePatches"],
    patch_renders: &["trainingRuntimeSpec", "template"],
};

/// The kinds this file describes.
pub static KINDS: &[&KindSpec] = &[&TRAIN_JOB];

pub static TRAIN_JOB: KindSpec = KindSpec {
    name: "TrainJob",
    group: GROUP,
    version: VERSION,
    kind: "TrainJob",
    resource: "trainjobs",
    signature: &["runtimeRef", "trainer"],
    positions: &[],
    runtime: Some(&RUNTIME),
    run: Run {
        deadline: Deadline::Run(
            "/spec",
            "activeDeadlineSeconds",
            "spec.activeDeadlineSeconds",
        ),
        ends: Ends::WithRun,
        ..Run::UNSTATED
    },
    // Trainer names a TrainJob's JobSet after the TrainJob.
    makes: &[Makes {
        kind: "JobSet",
        mark: &[OWN_NAME],
        of: "name",
        through: Through::Direct,
    }],
    controller: &["system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"],
    native: Err(
        "a TrainJob's pods come from its training runtime: its size and node container are read from the runtime (cluster lookups), its own runtimePatches are judged as pod specs, and launchgate writes its defaults into a runtime patch whose shape depends on the runtime",
    ),
    webhook_rule: "trainjob",
    watch: Watch::Every,
    kueue: Kueue::Suspends("spec.suspend"),
    ..KindSpec::BASE
};
