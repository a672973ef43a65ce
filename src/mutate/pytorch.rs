//! The `pytorch` mutator: distributed PyTorch wiring ([`crate::pytorch`]) run by the mutating
//! webhook. It hands the wiring what it needs from the admission ([`Site`]: the queue's
//! settings, the request, the cluster, the training-container walk, the rendezvous preflight)
//! and takes its warnings ([`Warnings`]); which kinds are wired, and how, is the folder's
//! table ([`crate::pytorch::wire`]).

use super::{Findings, MutationContext, Mutator};
use crate::cluster::ClusterView;
use crate::json::Pointer as _;
use crate::patch::{MapNode, Node};
use crate::pytorch::site::{EachContainer, Site, Warnings};
use crate::pytorch::{self, PytorchConfig};
use crate::topology::guardrails::rendezvous_service_problems;
use crate::workload::intent::UserIntent;
use serde_json::Value;

/// The pytorch mutator.
pub const MUTATOR: Mutator = Mutator::new("pytorch", mutate);

pub fn mutate(ctx: &MutationContext<'_>, object: &mut Node<'_, Value>, f: &mut Findings) -> bool {
    let cfg = ctx.settings.pytorch;
    if !cfg.enabled || !object.is_object() || (ctx.child && !ctx.kind.is_pod()) {
        return false;
    }
    pytorch::wire(ctx.kind, ctx, object, f)
}

impl Site for MutationContext<'_> {
    fn pytorch(&self) -> &PytorchConfig {
        self.settings.pytorch
    }

    fn sidecars(&self) -> &[String] {
        self.sidecars
    }

    fn namespace(&self) -> Option<&str> {
        self.request.namespace.as_deref()
    }

    fn cluster(&self) -> &dyn ClusterView {
        self.cluster
    }

    fn object_name<'v>(&'v self, object: &'v Value) -> &'v str {
        MutationContext::object_name(self, object)
    }

    fn intent(&self, object: &Value) -> &UserIntent {
        MutationContext::intent(self, object)
    }

    fn for_each_training_container(
        &self,
        pod_spec: &mut MapNode<'_>,
        spec_path: &dyn std::fmt::Display,
        f: &mut EachContainer<'_>,
    ) {
        MutationContext::for_each_training_container(self, pod_spec, spec_path, f)
    }

    /// The rendezvous preflight (`guardrails.rendezvousPreflight`, with cluster lookups): the
    /// headless Service the pods' subdomain names, as the cluster has it now.
    fn preflight_rendezvous_service(
        &self,
        job: &Value,
        job_name: &str,
        subdomain: &str,
        port: u16,
        findings: &mut dyn Warnings,
    ) {
        if !self.settings.guardrails.rendezvous_preflight || !self.cluster.is_connected() {
            return;
        }
        let Some(namespace) = self.request.namespace.as_deref() else {
            return;
        };
        let service = self.cluster.service(namespace, subdomain);
        let labels = job
            .at("/spec/template/metadata/labels")
            .and_then(Value::as_object);
        for problem in rendezvous_service_problems(
            service.as_deref(),
            namespace,
            subdomain,
            labels,
            job_name,
            port,
        ) {
            // The API server cuts long warnings: what and why first.
            findings.warn(
                crate::rules::GUARDRAILS_RENDEZVOUS_PREFLIGHT,
                format!("launchgate: rendezvous preflight: {problem}"),
            );
        }
    }
}

impl Warnings for Findings {
    fn warn(&mut self, notice: &'static crate::rules::Notice, message: String) {
        Findings::warn(self, notice, message);
    }

    fn env_from(&mut self, where_: &dyn std::fmt::Display, vars: &[(&str, String)]) {
        self.add_warning(super::env_from_warning(where_, vars));
    }
}

#[cfg(test)]
mod mutator_tests {
    use super::*;
    use crate::mutate::test_support::mutate_with;
    use crate::pytorch::config::OPT_IN_ANNOTATION;
    use crate::pytorch::volcano::RANK_OFFSET_ANNOTATION;
    use serde_json::json;

    fn vcjob(master_replicas: i64) -> Value {
        json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "wandb"},
        "spec": {"plugins": {"pytorch": ["--port=5000"]}, "tasks": [
            {"name": "master", "replicas": master_replicas, "template": {"spec": {"containers": [
                {"name": "train"}, {"name": "istio-proxy", "ports": [{"name": "http", "containerPort": 15001}]}
            ]}}},
            {"name": "worker", "replicas": 2, "template": {"spec": {"containers": [{"name": "train"}]}}},
            {"name": "tensorboard", "replicas": 1, "template": {"spec": {"containers": [{"name": "tb"}]}}}
        ]}})
    }

    #[test]
    fn volcano_job_is_wired_once_and_sidecars_are_untouched() {
        let (out, f) = mutate_with(&MUTATOR, "{}", vcjob(1));
        assert!(f.warning_texts().is_empty(), "{:?}", f.warning_texts());
        let master = &out["spec"]["tasks"][0]["template"];
        assert_eq!(
            master["metadata"]["annotations"][RANK_OFFSET_ANNOTATION],
            "0"
        );
        let train = &master["spec"]["containers"][0];
        assert_eq!(
            train["env"][0],
            json!({"name": "MASTER_ADDR", "value": "j-master-0.j"})
        );
        assert_eq!(
            train["env"][1],
            json!({"name": "MASTER_PORT", "value": "5000"})
        );
        assert_eq!(train["env"][2], json!({"name": "WORLD_SIZE", "value": "3"}));
        assert_eq!(train["ports"][0]["containerPort"], 5000);
        assert_eq!(
            master["spec"]["containers"][1],
            vcjob(1)["spec"]["tasks"][0]["template"]["spec"]["containers"][1],
            "sidecar untouched"
        );
        let worker = &out["spec"]["tasks"][1]["template"];
        assert_eq!(
            worker["metadata"]["annotations"][RANK_OFFSET_ANNOTATION],
            "1"
        );
        let tb = &out["spec"]["tasks"][2]["template"];
        assert_eq!(
            tb["metadata"]["annotations"][RANK_OFFSET_ANNOTATION],
            "none"
        );
        assert!(
            tb["spec"]["containers"][0].get("ports").is_none(),
            "no port for extra tasks"
        );
        assert_eq!(tb["spec"]["containers"][0]["env"][2]["value"], "3");
        let (again, _) = mutate_with(&MUTATOR, "{}", out.clone());
        assert_eq!(again, out, "idempotent");
    }

    #[test]
    fn two_master_replicas_are_skipped_by_the_mutator_with_a_warning() {
        let (out, f) = mutate_with(&MUTATOR, "{}", vcjob(2));
        // Nothing wired; only the record that its pods take no rank.
        let mut expected = vcjob(2);
        for task in expected["spec"]["tasks"].as_array_mut().unwrap() {
            task["template"]["metadata"] = json!({"annotations": {RANK_OFFSET_ANNOTATION: "none"}});
        }
        assert_eq!(out, expected);
        assert!(
            f.warning_texts()[0].contains("replicas of the PyTorch master task \"master\" is 2"),
            "{:?}",
            f.warning_texts()
        );
    }

    #[test]
    fn wait_for_master_goes_to_workers_only() {
        let (out, _) = mutate_with(
            &MUTATOR,
            "{pytorch: {waitForMaster: {enabled: true, timeoutSeconds: 60}}}",
            vcjob(1),
        );
        assert!(
            out["spec"]["tasks"][0]["template"]["spec"]
                .get("initContainers")
                .is_none()
        );
        let init = &out["spec"]["tasks"][1]["template"]["spec"]["initContainers"][0];
        assert_eq!(init["name"], "wait-for-master");
        assert_eq!(init["env"][0]["value"], "j-master-0.j");
        assert_eq!(init["env"][1]["value"], "5000");
        assert_eq!(init["env"][2]["value"], "60");
    }

    #[test]
    fn a_trainjob_gets_no_env_and_the_queues_process_count() {
        let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "run", "annotations": {OPT_IN_ANNOTATION: "true"}},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}});
        let (out, f) = mutate_with(&MUTATOR, "{pytorch: {nprocPerNode: 8}}", tj.clone());
        assert_eq!(
            out["spec"]["trainer"],
            json!({"numNodes": 2, "numProcPerNode": 8})
        );
        assert!(
            f.warning_texts()[0].contains("rejects them from anyone else"),
            "{:?}",
            f.warning_texts()
        );
        assert!(!serde_json::to_string(&out).unwrap().contains("PET_"));
        let mut own = tj.clone();
        own["spec"]["trainer"]["numProcPerNode"] = json!(4);
        let (out, _) = mutate_with(&MUTATOR, "{pytorch: {nprocPerNode: 8}}", own.clone());
        assert_eq!(out, own);
        let (out, _) = mutate_with(&MUTATOR, "{pytorch: {nprocPerNode: auto}}", tj.clone());
        assert_eq!(out, tj);
    }

    #[test]
    fn disabled_queue_and_malformed_objects_change_nothing() {
        let (out, _) = mutate_with(&MUTATOR, "{pytorch: {enabled: false}}", vcjob(1));
        assert_eq!(out, vcjob(1));
        for spec in [
            json!(null),
            json!({"plugins": {"pytorch": null}, "tasks": 3}),
            json!({"plugins": {"pytorch": {}}, "tasks": [1, {"name": "master", "replicas": 1, "template": 2}]}),
        ] {
            let mut job = vcjob(1);
            job["spec"] = spec;
            let _ = mutate_with(&MUTATOR, "{}", job);
        }
        for obj in [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"volcano.sh/job-name": 3}}, "spec": []}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"volcano.sh/job-name": "j", "volcano.sh/task-spec": "worker", "volcano.sh/task-index": "1"}}, "spec": {"containers": "x"}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "d", "annotations": {OPT_IN_ANNOTATION: "true"}}, "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "template": {"spec": {"subdomain": "d", "containers": [7]}}}}),
            json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {}, "spec": {"pytorchReplicaSpecs": {"Master": 1, "Worker": {"template": {"spec": {"containers": {}}}}}}}),
        ] {
            let _ = mutate_with(
                &MUTATOR,
                "{pytorch: {waitForMaster: {enabled: true}, nprocPerNode: 2}}",
                obj,
            );
        }
    }
}
