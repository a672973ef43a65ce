//! The trail of every decision on a launch workload: one structured log line and its metrics.
//!
//! Skipped requests (not a launch workload, DELETE, subresources, other kinds) leave no line
//! and are only counted in `launchgate_admission_requests_total{outcome="skipped"}`. Every other
//! decision logs one `admission decision` line with who sent what to which queue and what
//! launchgate answered: denials and warnings at `info`, plain allows and patches at `debug`
//! (so the default level shows what needs a look without logging every pod).

use super::metrics::{DecisionLabels, DecisionMetrics, ViolationLabels, WarningLabels};
use crate::review::{Endpoint, Outcome, ReviewSummary};
use crate::rules::Violation;
use std::time::Duration;

/// The outcome as the decision log and `launchgate_decisions_total` name it.
///
/// `denied`; else `warned` when the client got warnings or the queue's limits were violated
/// (warn or audit enforcement); else `patched` when a patch was returned; else `allowed`.
pub(crate) fn outcome_label(s: &ReviewSummary) -> &'static str {
    match s.outcome {
        Outcome::Denied => "denied",
        Outcome::AllowedWithViolations => "warned",
        _ if !s.warnings.is_empty() => "warned",
        Outcome::Patched => "patched",
        _ => "allowed",
    }
}

/// One line for lists and multi-line messages in a log field.
fn one_line<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items
        .map(|i| i.replace('\n', "; "))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Logs the decision line (nothing for skipped requests).
pub(crate) fn log_decision(endpoint: Endpoint, s: &ReviewSummary, elapsed: Duration) {
    if s.outcome == Outcome::Skipped {
        return;
    }
    let outcome = outcome_label(s);
    // Every field that comes from the object or the request is recorded as a string value:
    // the text format prints it quoted and escaped (a newline in `metadata.name`, which the API
    // server validates only after mutating admission, cannot start a forged line), the JSON
    // format as an escaped JSON string.
    let denial = s
        .message
        .as_deref()
        .map(|m| m.replace('\n', "; "))
        .unwrap_or_default();
    let violations = one_line(s.violations.iter().map(|v| v.message.as_str()));
    let rules = crate::rules::ids(&s.violations).join(",");
    let warnings = one_line(s.warnings.iter().map(|w| w.message.as_str()));
    let warning_rules = crate::rules::warning_ids(&s.warnings).join(",");
    macro_rules! line {
        ($level:expr) => {
            tracing::event!(
                $level,
                endpoint = endpoint.as_str(),
                uid = s.uid.as_str(),
                namespace = s.namespace.as_str(),
                name = s.name.as_str(),
                generate_name = s.generate_name.as_str(),
                kind = s.api_kind.as_str(),
                operation = s.operation,
                user = s.user.as_str(),
                queue = s.queue.as_deref().unwrap_or(""),
                outcome,
                dry_run = s.dry_run,
                denial = denial.as_str(),
                violations = violations.as_str(),
                rules = rules.as_str(),
                enforcement = s.enforcement.unwrap_or(""),
                warnings = warnings.as_str(),
                warning_rules = warning_rules.as_str(),
                patch_operations = s.patch_operations,
                patch_bytes = s.patch_bytes,
                duration_us = elapsed.as_micros() as u64,
                "admission decision"
            )
        };
    }
    if matches!(outcome, "denied" | "warned") {
        line!(tracing::Level::INFO);
    } else {
        line!(tracing::Level::DEBUG);
    }
}

/// Counts the decision (nothing for skipped requests but their warnings: a launch workload
/// that names no queue is told so).
pub(crate) fn count_decision(metrics: &DecisionMetrics, endpoint: Endpoint, s: &ReviewSummary) {
    let queue = s.queue.clone().unwrap_or_default();
    for w in &s.warnings {
        metrics
            .warnings
            .get_or_create(&WarningLabels {
                queue: queue.clone(),
                rule: w.rule,
            })
            .inc();
    }
    if s.outcome == Outcome::Skipped {
        return;
    }
    metrics
        .decisions
        .get_or_create(&DecisionLabels {
            endpoint: endpoint.as_str(),
            queue: queue.clone(),
            outcome: outcome_label(s),
        })
        .inc();
    for v in &s.violations {
        count_violation(metrics, &queue, v);
    }
}

/// Counts one violation in `launchgate_violations_total{queue, rule, enforcement}`: its rule's
/// id (the table's, [`crate::rules`]) and how it was answered.
pub(crate) fn count_violation(metrics: &DecisionMetrics, queue: &str, v: &Violation) {
    metrics
        .violations
        .get_or_create(&ViolationLabels {
            queue: queue.to_string(),
            rule: v.rule.id,
            enforcement: v.effect.as_str(),
        })
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The JSON lines `f` logs at `level` and above.
    fn json_lines(level: tracing::Level, f: impl FnOnce()) -> Vec<serde_json::Value> {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_max_level(level)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn denied() -> ReviewSummary {
        ReviewSummary {
            kind: "Job",
            operation: "CREATE",
            outcome: Outcome::Denied,
            queue: Some("gpu-queue".into()),
            uid: "u-1".into(),
            namespace: "ml".into(),
            name: "".into(),
            generate_name: "train-".into(),
            api_kind: "Job".into(),
            user: "alice@example.com".into(),
            violations: vec![
                Violation::new(
                    crate::rules::LIMITS_VARIABLES,
                    "queue \"gpu-queue\": spec...nvidia.com/gpu=8 is above the maximum 4 (variable \"gpus\")",
                )
                .key("gpus"),
            ],
            enforcement: Some("deny"),
            message: Some("queue \"gpu-queue\": first\nqueue \"gpu-queue\": second".into()),
            ..ReviewSummary::default()
        }
    }

    #[test]
    fn a_denial_is_one_info_line_with_object_user_queue_and_message() {
        let lines = json_lines(tracing::Level::INFO, || {
            log_decision(Endpoint::Validate, &denied(), Duration::from_micros(420))
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = &lines[0];
        assert_eq!(l["level"], "INFO");
        assert_eq!(l["message"], "admission decision");
        for (k, v) in [
            ("uid", "u-1"),
            ("namespace", "ml"),
            ("generate_name", "train-"),
            ("kind", "Job"),
            ("operation", "CREATE"),
            ("user", "alice@example.com"),
            ("queue", "gpu-queue"),
            ("outcome", "denied"),
            ("endpoint", "validate"),
            ("enforcement", "deny"),
        ] {
            assert_eq!(l[k], v, "{k} in {l}");
        }
        assert_eq!(l["dry_run"], false);
        assert_eq!(
            l["denial"],
            "queue \"gpu-queue\": first; queue \"gpu-queue\": second"
        );
        assert_eq!(l["duration_us"], 420);
        assert!(
            l["violations"]
                .as_str()
                .unwrap()
                .contains("(variable \"gpus\")")
        );
        // The multi-line denial stays on one log line.
        assert!(!l.to_string().contains("\\n"), "{l}");
    }

    #[test]
    fn object_fields_cannot_forge_a_text_log_line() {
        // Names are validated only after mutating admission: a newline reaches /mutate.
        let forged = ReviewSummary {
            name: "x\nINFO admission decision outcome=\"allowed\"".into(),
            generate_name: "g\r".into(),
            user: "eve\u{1b}[2J".into(),
            warnings: vec![crate::rules::Warning::new(
                crate::rules::CACHE_MOUNT_TAKEN,
                "w\u{0}",
            )],
            ..denied()
        };
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            log_decision(Endpoint::Mutate, &forged, Duration::ZERO)
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains(r#"name="x\nINFO admission decision outcome=\"allowed\"""#),
            "{text}"
        );
        assert!(text.contains(r#"generate_name="g\r""#), "{text}");
        assert!(text.contains(r#"user="eve\u{1b}[2J""#), "{text}");
        assert!(!text.contains('\u{1b}') && !text.contains('\0'), "{text}");
        // JSON keeps the exact values, escaped as JSON.
        let lines = json_lines(tracing::Level::INFO, || {
            log_decision(Endpoint::Mutate, &forged, Duration::ZERO)
        });
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["name"], forged.name.as_str());
        assert_eq!(lines[0]["user"], forged.user.as_str());
    }

    #[test]
    fn allowed_and_patched_are_debug_and_skipped_is_silent() {
        let patched = ReviewSummary {
            outcome: Outcome::Patched,
            patch_operations: 3,
            patch_bytes: 120,
            ..denied()
        };
        let info = json_lines(tracing::Level::INFO, || {
            log_decision(Endpoint::Mutate, &patched, Duration::ZERO)
        });
        assert!(info.is_empty(), "{info:?}");
        let debug = json_lines(tracing::Level::DEBUG, || {
            log_decision(Endpoint::Mutate, &patched, Duration::ZERO)
        });
        assert_eq!(debug.len(), 1);
        assert_eq!(debug[0]["level"], "DEBUG");
        assert_eq!(debug[0]["outcome"], "patched");
        assert_eq!(debug[0]["patch_operations"], 3);
        assert_eq!(debug[0]["patch_bytes"], 120);
        let skipped = ReviewSummary::default();
        let none = json_lines(tracing::Level::TRACE, || {
            log_decision(Endpoint::Mutate, &skipped, Duration::ZERO)
        });
        assert!(none.is_empty());
    }

    #[test]
    fn warnings_make_an_info_line() {
        let warned = ReviewSummary {
            outcome: Outcome::Patched,
            warnings: vec![crate::rules::Warning::new(
                crate::rules::QUEUE_UNKNOWN,
                "queue \"k8s-test\" is not configured",
            )],
            message: None,
            ..denied()
        };
        assert_eq!(outcome_label(&warned), "warned");
        let lines = json_lines(tracing::Level::INFO, || {
            log_decision(Endpoint::Mutate, &warned, Duration::ZERO)
        });
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["outcome"], "warned");
        assert!(lines[0]["warnings"].as_str().unwrap().contains("k8s-test"));
    }

    #[test]
    fn outcome_labels() {
        let with = |outcome| ReviewSummary {
            outcome,
            ..ReviewSummary::default()
        };
        assert_eq!(outcome_label(&with(Outcome::Denied)), "denied");
        assert_eq!(
            outcome_label(&with(Outcome::AllowedWithViolations)),
            "warned"
        );
        assert_eq!(outcome_label(&with(Outcome::Patched)), "patched");
        assert_eq!(outcome_label(&with(Outcome::Allowed)), "allowed");
    }

    #[test]
    fn violations_are_counted_under_their_rule_id_never_their_message() {
        let metrics = crate::server::metrics::Metrics::default().decisions;
        // A message crafted to look like another rule's counts under the rule that found it.
        let crafted = ReviewSummary {
            violations: vec![
                Violation::new(
                    crate::rules::LIMITS_ALLOWED_REGISTRIES,
                    "queue \"q\": spec.image=\"a (variable \\\"x\\\")\" is not from an allowed registry",
                ),
                Violation::new(crate::rules::GUARDRAILS_COST_CEILING, "… (totals)")
                    .effect(crate::rules::Effect::Warn),
            ],
            ..denied()
        };
        count_decision(&metrics, Endpoint::Validate, &crafted);
        let count = |rule: &'static str, enforcement: &'static str| {
            metrics
                .violations
                .get_or_create(&ViolationLabels {
                    queue: "gpu-queue".into(),
                    rule,
                    enforcement,
                })
                .get()
        };
        assert_eq!(count("limits.allowedRegistries", "deny"), 1);
        assert_eq!(count("guardrails.costCeiling", "warn"), 1);
        assert_eq!(count("limits.variables", "deny"), 0);
        assert_eq!(count("limits.totals", "warn"), 0);
    }

    #[test]
    fn warnings_are_counted_and_logged_under_their_id() {
        let metrics = crate::server::metrics::Metrics::default().decisions;
        let w = |notice, text: &str| crate::rules::Warning::new(notice, text);
        let warned = ReviewSummary {
            outcome: Outcome::Patched,
            message: None,
            violations: Vec::new(),
            warnings: vec![
                w(crate::rules::CACHE_MOUNT_TAKEN, "a"),
                w(crate::rules::CACHE_MOUNT_TAKEN, "b"),
                w(crate::rules::QUEUE_UNKNOWN, "c"),
            ],
            ..denied()
        };
        count_decision(&metrics, Endpoint::Mutate, &warned);
        let count = |rule: &'static str| {
            metrics
                .warnings
                .get_or_create(&WarningLabels {
                    queue: "gpu-queue".into(),
                    rule,
                })
                .get()
        };
        assert_eq!(count("cache.mountTaken"), 2);
        assert_eq!(count("queue.unknown"), 1);
        assert_eq!(count("limits.variables"), 0);
        let lines = json_lines(tracing::Level::INFO, || {
            log_decision(Endpoint::Mutate, &warned, Duration::ZERO)
        });
        assert_eq!(lines[0]["warning_rules"], "cache.mountTaken,queue.unknown");
    }

    #[test]
    fn the_log_line_names_the_rule_ids() {
        let lines = json_lines(tracing::Level::INFO, || {
            log_decision(Endpoint::Validate, &denied(), Duration::ZERO)
        });
        assert_eq!(lines[0]["rules"], "limits.variables");
    }
}
