//! The config parser. Every input is tried twice: as YAML text as-is (when it is UTF-8), and as
//! edit choices applied to the embedded default (or the wide) config, serialised as YAML or
//! JSON. A config that loads must compile again from its parsed form, load again from its own
//! YAML serialisation, and review the recorded fixtures without breaking any review check.
#![no_main]

use arbitrary::{Result, Unstructured};
use launchgate::Policy;
use launchgate::policy::DEFAULT_CONFIG_YAML;
use launchgate_fuzz::{FIXTURES, Step, WIDE_CONFIG_YAML, edit, keys, review_both};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::sync::LazyLock;

/// Config keys and values, field paths and templates.
const CONFIG_WORDS: &[&str] = &[
    "",
    "0",
    "-1",
    "4",
    "100m",
    "12Gi",
    "1e1000",
    "99999999999999999999Ei",
    "true",
    "null",
    "gpu-queue",
    "queue-b",
    "nope",
    "match",
    "launchLabels",
    "queueLabels",
    "queueNameLabels",
    "queueEnv",
    "exemptions",
    "serviceAccounts",
    "sidecarContainers",
    "defaultQueue",
    "namespaceQueues",
    "queues",
    "securityContext",
    "enabled",
    "allowPrivilegeEscalation",
    "dropCapabilities",
    "seccompProfile",
    "runAsNonRoot",
    "runAsUser",
    "fsGroup",
    "jobDefaults",
    "backoffLimit",
    "ttlSecondsAfterFinished",
    "volcanoMaxRetry",
    "restartPolicy",
    "treatApiDefaultBackoffAsUnset",
    "cache",
    "volumeName",
    "persistentVolumeClaim",
    "claimName",
    "nfs",
    "server",
    "path",
    "mountPath",
    "nonRootMountPath",
    "env",
    "readOnly",
    "pytorch",
    "port",
    "override",
    "torchrun",
    "nprocPerNode",
    "indexedJobs",
    "onUnwirable",
    "waitForMaster",
    "image",
    "timeoutSeconds",
    "resources",
    "requests",
    "limits",
    "cpu",
    "memory",
    "nvidia.com/gpu",
    "enforcement",
    "template",
    "strict",
    "variables",
    "fields",
    "totals",
    "maxActiveDeadlineSeconds",
    "allowedRegistries",
    "allowedNamespaces",
    "type",
    "minimum",
    "maximum",
    "enum",
    "default",
    "required",
    "description",
    "schema",
    "integer",
    "number",
    "float",
    "string",
    "quantity",
    "deny",
    "warn",
    "audit",
    "auto",
    "Never",
    "OnFailure",
    "RuntimeDefault",
    "ALL",
    "wandb.ai/monitor",
    "launchgate.io/queue",
    "queue",
    "wandb",
    "launch",
    "WANDB_LAUNCH_QUEUE_NAME",
    "gpus",
    "{{gpus}}",
    "{{gpus}}{{gpus}}",
    "a{{gpus}}b",
    "{{",
    "${image_uri}",
    "containers[*].resources.limits.cpu",
    "containers[0].image",
    "containers[*]",
    "initContainers[*].env[*].value",
    "spec.backoffLimit",
    "spec.template.spec.containers[*].image",
    "metadata.labels.queue",
    "metadata.annotations",
    "[*]",
    "a..b",
    "a[",
    "a]b",
    ".",
    "spec:\n  template:\n    spec:\n      containers:\n        - resources:\n            limits:\n              cpu: '{{gpus}}'\n",
    "{\"spec\": {\"backoffLimit\": \"{{gpus}}\"}}",
    "[1, 2]",
    "- a\n- b\n",
    "queueEntityEnv",
    "WANDB_LAUNCH_QUEUE_ENTITY",
    "acme/gpu-queue",
    "name",
    "resource_args",
    "kubernetes",
    "kind",
    "apiVersion",
    "PyTorchJob",
    "kubeflow.org/v1",
    "pytorchReplicaSpecs",
    "tasks",
    "${",
    "kubernetes:\n  kind: PyTorchJob\n  spec:\n    pytorchReplicaSpecs:\n      Worker:\n        template:\n          spec:\n            containers:\n              - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n",
    "{\"resource_args\": {\"kubernetes\": {\"spec\": {\"template\": {\"spec\": {\"containers\": [{\"image\": \"${image_uri}\"}]}}}}}}",
    "- {name: gpus, schema: {type: integer, maximum: 4}}\n",
];

static BASES: LazyLock<[Value; 2]> = LazyLock::new(|| {
    [DEFAULT_CONFIG_YAML, WIDE_CONFIG_YAML]
        .map(|text| serde_yaml::from_str(text).expect("the base configs are YAML"))
});

/// Checks a config text: errors render; a policy that loads round-trips and reviews.
fn check(text: &str, fixture: usize) {
    let policy = match Policy::from_yaml(text) {
        Ok(policy) => policy,
        Err(errors) => {
            assert!(!errors.0.is_empty(), "an error list is never empty");
            let _ = errors.to_string();
            return;
        }
    };
    if let Err(e) = Policy::from_config(policy.config.clone()) {
        panic!("a loaded config does not compile again: {e}");
    }
    let yaml = serde_yaml::to_string(&policy.config).expect("a config serialises");
    if let Err(e) = Policy::from_yaml(&yaml) {
        panic!("a loaded config does not load from its own YAML: {e}\n{yaml}");
    }
    let _ = review_both(&policy, FIXTURES[fixture % FIXTURES.len()].1);
}

fn structured(u: &mut Unstructured) -> Result<()> {
    let mut config = BASES[usize::from(u.arbitrary::<bool>()?)].clone();
    let queue = keys(&["queues", "gpu-queue"]);
    let limits = keys(&["queues", "gpu-queue", "limits"]);
    let matching = keys(&["match"]);
    let starts: [&[Step]; 5] = [&[], &queue, &limits, &limits, &matching];
    for _ in 0..u.int_in_range(1..=6)? {
        edit(u, &mut config, &starts, CONFIG_WORDS)?;
    }
    let text = if u.arbitrary()? {
        serde_json::to_string(&config).expect("serialises")
    } else {
        serde_yaml::to_string(&config).expect("serialises")
    };
    let fixture = u.arbitrary::<u8>()?;
    check(&text, usize::from(fixture));
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check(text, data.len());
    }
    let _ = structured(&mut Unstructured::new(data));
});
