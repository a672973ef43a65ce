//! The run-level deadline (`limits.maxActiveDeadlineSeconds`): where each kind keeps it, and
//! the check.

use super::Evaluation;
use crate::kinds::Deadline;
use crate::quantity::Quantity;
use crate::rules::{self, Violation};
use crate::validate::path::{self, FieldPath};
use crate::validate::schema::{ValueType, display_value};
use crate::validate::template::Anchor;
use crate::workload::WorkloadKind;

/// Where `maxActiveDeadlineSeconds` reads the run-level deadline of a kind: its descriptor's
/// own field ([`crate::kinds::Run::deadline`]) and nothing else — another kind's field at
/// another path is no deadline of this kind (its CRD prunes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::validate) enum RunDeadline {
    /// One field of the object (dotted): set, it bounds the whole run.
    Run(&'static str),
    /// A field of each Job the kind runs (dotted, with `[*]` over the Jobs): it bounds the run
    /// when every Job sets it (a JobSet's replicated Jobs).
    EachJob(Vec<String>),
    /// No field of its own: only its pod templates' deadlines (a Volcano Job's tasks).
    Pods,
    /// Nothing bounds the run but deletion (a RayCluster): why, and what to use instead.
    Never {
        why: &'static str,
        set: &'static str,
    },
}

/// The kind's [`RunDeadline`], from its descriptor.
pub(in crate::validate) fn run_deadline(kind: WorkloadKind) -> RunDeadline {
    match kind.spec().run.deadline {
        Deadline::Run(_, _, dotted) => RunDeadline::Run(dotted),
        Deadline::EachJob => RunDeadline::EachJob(
            kind.spec()
                .positions
                .iter()
                .filter_map(|position| {
                    // The Job spec holds the pod template: its deadline sits beside it.
                    let (_, job) = position.template.split_last()?;
                    let mut at = position.holders.path().join(".");
                    if matches!(position.holders, crate::kinds::Holders::Each(_)) {
                        at.push_str("[*]");
                    }
                    for key in job {
                        at.push('.');
                        at.push_str(key);
                    }
                    Some(format!("{at}.activeDeadlineSeconds"))
                })
                .collect(),
        ),
        Deadline::EachPod => RunDeadline::Pods,
        Deadline::Never { why, set } => RunDeadline::Never { why, set },
    }
}

impl<'a> Evaluation<'a> {
    pub(super) fn check_deadline(&mut self, maximum: i64) {
        let resolve = |dotted: &str| {
            path::resolve(
                self.object,
                "",
                &FieldPath::parse(dotted).unwrap_or_default().0,
            )
        };
        let (places, run_bound) = match run_deadline(self.kind) {
            RunDeadline::Run(dotted) => {
                let places = resolve(dotted);
                let set = places.iter().any(|(_, v)| v.is_some());
                (places, set)
            }
            RunDeadline::EachJob(paths) => {
                let places: Vec<_> = paths.iter().flat_map(|p| resolve(p)).collect();
                let set = !places.is_empty() && places.iter().all(|(_, v)| v.is_some());
                (places, set)
            }
            RunDeadline::Pods => (Vec::new(), false),
            RunDeadline::Never { why, set } => {
                self.report(
                    Violation::new(
                        rules::LIMITS_MAX_ACTIVE_DEADLINE_SECONDS,
                        format!(
                            "{why}, so no deadline bounds it; the queue allows at most {maximum} (maxActiveDeadlineSeconds): use {set}"
                        ),
                    )
                    .limit(maximum.to_string()),
                );
                return;
            }
        };
        let pod_path = FieldPath::parse("spec.activeDeadlineSeconds").unwrap_or_default();
        let pod_places = self.places(Anchor::PodTemplate, &pod_path);
        let every_pod = !pod_places.is_empty() && pod_places.iter().all(|(_, v)| v.is_some());
        if !run_bound && !every_pod {
            self.report(
                Violation::new(
                    rules::LIMITS_MAX_ACTIVE_DEADLINE_SECONDS,
                    format!(
                        "activeDeadlineSeconds is not set; the queue allows at most {maximum} (maxActiveDeadlineSeconds), so set it on the workload or on every pod template"
                    ),
                )
                .limit(maximum.to_string()),
            );
        }
        for (place, value) in places.into_iter().chain(pod_places) {
            let Some(value) = value else { continue };
            let within = value.as_i64().is_some_and(|s| s <= maximum)
                || Quantity::from_json(value)
                    .and_then(Result::ok)
                    .is_some_and(|q| q <= Quantity::from_int(maximum));
            if !within {
                let shown = display_value(value, Some(ValueType::Integer));
                self.report(
                    Violation::new(
                        rules::LIMITS_MAX_ACTIVE_DEADLINE_SECONDS,
                        format!(
                            "{place}={shown} exceeds maximum {maximum} (maxActiveDeadlineSeconds)"
                        ),
                    )
                    .at(place)
                    .value(shown)
                    .limit(maximum.to_string()),
                );
            }
        }
    }
}
