//! What the wiring needs from the mutating webhook that runs it, and where it leaves its
//! warnings. The mutating webhook's `pytorch` mutator provides both (`crate::mutate::pytorch`),
//! so this folder sits below the two paths and never imports either.

use super::config::PytorchConfig;
use crate::cluster::ClusterView;
use crate::patch::MapNode;
use crate::workload::intent::UserIntent;
use serde_json::Value;

/// What is called for each training container: its display path (written only when a message
/// shows it) and the container.
pub type EachContainer<'a> = dyn FnMut(&dyn std::fmt::Display, &mut MapNode<'_>) + 'a;

/// The admission a workload is wired in: the queue's settings, the request, the cluster.
pub trait Site {
    /// The queue's PyTorch settings.
    fn pytorch(&self) -> &PytorchConfig;
    /// Container names that are sidecars, never training containers.
    fn sidecars(&self) -> &[String];
    /// The request's namespace.
    fn namespace(&self) -> Option<&str>;
    /// Read-only snapshot of cluster state (owner Jobs); empty offline.
    fn cluster(&self) -> &dyn ClusterView;
    /// What the user wrote of `object`, the request's object (read once per request).
    fn intent(&self, object: &Value) -> &UserIntent;
    /// The object's name: the request's, else `metadata.name` (empty with `generateName`).
    fn object_name<'v>(&'v self, object: &'v Value) -> &'v str;
    /// Calls `f` for every training container of a pod spec with its display path.
    fn for_each_training_container(
        &self,
        pod_spec: &mut MapNode<'_>,
        spec_path: &dyn std::fmt::Display,
        f: &mut EachContainer<'_>,
    );
    /// The rendezvous preflight (`guardrails.rendezvousPreflight`): warns about the headless
    /// Service `subdomain` a wired Job's pods need, as the cluster has it now.
    fn preflight_rendezvous_service(
        &self,
        job: &Value,
        job_name: &str,
        subdomain: &str,
        port: u16,
        warnings: &mut dyn Warnings,
    );
}

/// Where the wiring leaves its warnings (shown by kubectl as `Warning: ...`).
pub trait Warnings {
    /// Leaves a warning of `notice` for the user.
    fn warn(&mut self, notice: &'static crate::rules::Notice, message: String);
    /// Leaves the warning for variables left unset because `envFrom` may set them.
    fn env_from(&mut self, where_: &dyn std::fmt::Display, vars: &[(&str, String)]);
}

/// Reports problems found while wiring: always a warning from the mutator.
pub fn warn_unwirable(findings: &mut dyn Warnings, problems: &[String]) {
    for p in problems {
        findings.warn(
            crate::rules::PYTORCH_WIRING_SKIPPED,
            format!("launchgate: PyTorch wiring skipped: {p}"),
        );
    }
}
