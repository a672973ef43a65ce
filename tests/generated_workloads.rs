//! Property tests over generated launch workloads of every kind of the registry
//! (`common::generated`, one generator per registered kind) in every queue of
//! the configs the suites use (the built-in example, the chart's default, a queue with every
//! limit, the strict example, the fuzz targets' wide config and each recorded W&B queue
//! config), through the public core as the server answers them:
//!
//! * the mutating answer admits (a denial there is a bug: limits are the validating webhook's)
//!   with a patch that applies, and the patched object, sent again as the API server's
//!   reinvocation, gets no patch;
//! * the validating answer to the mutated object is the same every time it is asked, and a
//!   denial names the queue;
//! * a launch workload of a kind launchgate judges is never skipped;
//! * the patch, recorded as the mutators write, is the diff of the mutated object: the
//!   operations `json_patch::diff` gives, objects' members visited in key order.
//!
//! The same generator feeds the e2e differential suite, which runs a fixed sample of these on
//! the real API server, native policies against the webhook.

mod common;

use launchgate::Policy;
use launchgate::admission::AdmissionRequest;
use launchgate::cluster::NoCluster;
use launchgate::review::{Endpoint, Outcome, decide};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};
use std::sync::OnceLock;

/// The configs, each as a parsed policy with its queue names.
fn configs() -> &'static [(String, Policy, Vec<String>)] {
    static CONFIGS: OnceLock<Vec<(String, Policy, Vec<String>)>> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let root = common::root();
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        let chart: Value = serde_yaml::from_str(&read("charts/launchgate/values.yaml")).unwrap();
        let mut texts = vec![
            (
                "built-in".to_string(),
                launchgate::policy::DEFAULT_CONFIG_YAML.to_string(),
            ),
            (
                "chart default".to_string(),
                serde_yaml::to_string(&chart["config"]).unwrap(),
            ),
            (
                "strict example".to_string(),
                read("examples/policy-tests/strict-queue/config.yaml"),
            ),
            ("wide".to_string(), read("fuzz/src/wide-config.yaml")),
        ];
        let mut every: Value =
            serde_yaml::from_str(launchgate::policy::DEFAULT_CONFIG_YAML).unwrap();
        let queue = every["defaultQueue"].as_str().unwrap().to_string();
        let limits = &mut every["queues"][&queue]["limits"];
        limits["totals"] = json!({"nvidia.com/gpu": {"maximum": 8}});
        limits["maxActiveDeadlineSeconds"] = json!(86400);
        limits["allowedRegistries"] = json!(["docker.io/acme", "acme"]);
        every["queues"][&queue]["guardrails"]["costCeiling"] =
            json!({"defaultDeadlineSeconds": 3600, "maxGpuHours": 8});
        texts.push(("every limit".into(), serde_yaml::to_string(&every).unwrap()));
        let dir = root.join("tests/fixtures/wandb-queues");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for file in files {
            let name = file.file_name().unwrap().to_string_lossy().to_string();
            if name == "terraform-show.json" {
                continue;
            }
            let config = json!({
                "defaultQueue": "q",
                "queues": {"q": {"limits": {"template": std::fs::read_to_string(&file).unwrap(),
                    "variables": {"gpus": {"type": "integer", "minimum": 0, "maximum": 4}}}}},
            });
            texts.push((name, serde_yaml::to_string(&config).unwrap()));
        }
        texts
            .into_iter()
            .map(|(name, text)| {
                let policy = Policy::from_yaml(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
                let queues = policy.queues.values().map(|q| q.name.clone()).collect();
                (name, policy, queues)
            })
            .collect()
    })
}

/// The oracle: `json_patch::diff` from `original` to `mutated`, on copies whose objects hold
/// their members in sorted key order (the order launchgate's patches follow).
fn diff(original: &Value, mutated: &Value) -> json_patch::Patch {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut members: Vec<_> = map.iter().collect();
                members.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(
                    members
                        .into_iter()
                        .map(|(k, v)| (k.clone(), sorted(v)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    json_patch::diff(&sorted(original), &sorted(mutated))
}

fn request(object: &Value) -> AdmissionRequest {
    AdmissionRequest::synthetic_create(object.clone(), Some("team-a")).unwrap()
}

proptest! {
    #![proptest_config(Config { cases: 256, ..Config::default() })]

    #[test]
    fn every_kind_is_mutated_idempotently_and_judged_alike_every_time(
        workload in common::generated::workload(),
        pick in any::<prop::sample::Index>(),
        queue_pick in any::<prop::sample::Index>(),
    ) {
        let (name, policy, queues) = &configs()[pick.index(configs().len())];
        let queue = &queues[queue_pick.index(queues.len())];
        let mut workload = workload;
        workload["metadata"]["labels"]["launchgate.io/queue"] = json!(queue);

        let mutated = decide(policy, Endpoint::Mutate, &request(&workload), &NoCluster);
        prop_assert!(mutated.response.allowed, "{name}: mutation denied: {:?}", mutated.response.status);
        prop_assert!(
            mutated.summary.outcome != Outcome::Skipped || mutated.summary.exempted_by.is_some(),
            "{name}: a launch workload was skipped ({:?})",
            mutated.summary.skipped
        );
        let mut object = workload.clone();
        json_patch::patch(&mut object, &mutated.patch).expect("the patch applies");
        prop_assert_eq!(&mutated.patch, &diff(&workload, &object), "{}: the recorded patch", name);
        let again = decide(policy, Endpoint::Mutate, &request(&object), &NoCluster);
        prop_assert!(again.patch.0.is_empty(), "{name}: reinvocation patched {:?}", again.patch);

        let first = decide(policy, Endpoint::Validate, &request(&object), &NoCluster);
        let second = decide(policy, Endpoint::Validate, &request(&object), &NoCluster);
        prop_assert_eq!(first.response.allowed, second.response.allowed);
        let message = |d: &launchgate::review::Decision| {
            d.response.status.as_ref().map(|s| s.message.clone())
        };
        prop_assert_eq!(message(&first), message(&second));
        if !first.response.allowed {
            let text = message(&first).unwrap_or_default();
            prop_assert!(text.contains(&format!("{queue:?}")) || text.starts_with("launchgate:"),
                "{name}: a denial names no queue: {text}");
        }
    }
}

/// Every kind the registry holds has a generator, so the properties above and the e2e
/// differential suite cover it as soon as it is registered.
#[test]
fn every_registered_kind_has_a_generator() {
    let missing = common::generated::missing_generators();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_sample_covers_every_kind_and_is_reproducible() {
    let queues = vec!["a".to_string(), "b".to_string()];
    let one = common::generated::sample(200, 7, &queues);
    assert_eq!(one, common::generated::sample(200, 7, &queues));
    // Every kind launchgate judges, as its registry lists them.
    for kind in launchgate::audit::listed_kinds() {
        let api_version = match kind.group {
            "" => kind.version.to_string(),
            group => format!("{group}/{}", kind.version),
        };
        assert!(
            one.iter()
                .any(|w| w["kind"] == kind.kind && w["apiVersion"] == api_version),
            "no {} ({api_version}) in the sample",
            kind.kind
        );
    }
    assert_eq!(one[1]["metadata"]["labels"]["launchgate.io/queue"], "b");
}
