//! The trail of every decision on a launch workload: one structured log line and its metrics.
//!
//! Skipped requests (not a launch workload, DELETE, subresources, other kinds) leave no line
//! and are only counted in `launchgate_admission_requests_total{outcome="skipped"}`. Every other
//! decision logs one `admission decision` line with who sent what to which queue and what
//! launchgate answered: denials and warnings at `info`, plain allows and patches at `debug`
//! (so the default level shows what needs a look without logging every pod).

use super::metrics::{DecisionLabels, DecisionMetrics, ViolationLabels};
use crate::review::{Endpoint, Outcome, ReviewSummary};
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

/// The config key a limit violation comes from, for `launchgate_violations_total{rule}`:
/// `variable:<name>`, `field:<path>`, `totals`, `strict`, `maxActiveDeadlineSeconds`,
/// `allowedRegistries`, `allowedNamespaces`, or `other`.
///
/// Every violation message ends with its source in parentheses (`(variable "gpus")`,
/// `(allowedRegistries: ...)`); the last marker in the message wins, so a user's value that
/// happens to contain such text cannot choose the label. Names are limited to config-like
/// characters and 64 bytes, so the label set stays as small as the config.
pub(crate) fn violation_rule(message: &str) -> String {
    const MARKERS: [(&str, &str); 7] = [
        (" (variable \"", "variable"),
        (" (field \"", "field"),
        (" (totals)", "totals"),
        (" (strict)", "strict"),
        (" (maxActiveDeadlineSeconds)", "maxActiveDeadlineSeconds"),
        (" (allowedRegistries: ", "allowedRegistries"),
        ("(allowedNamespaces: ", "allowedNamespaces"),
    ];
    let Some((at, marker, rule)) = MARKERS
        .iter()
        .filter_map(|(marker, rule)| message.rfind(marker).map(|at| (at, *marker, *rule)))
        .max_by_key(|(at, _, _)| *at)
    else {
        return "other".into();
    };
    if !marker.ends_with('"') {
        return rule.into();
    }
    let rest = &message[at + marker.len()..];
    let name = rest.split('"').next().unwrap_or_default();
    let plain = name.len() <= 64
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./[]*".contains(c));
    if plain && rest[name.len()..].starts_with("\")") {
        format!("{rule}:{name}")
    } else {
        rule.into()
    }
}

/// One line for lists and multi-line messages in a log field.
fn one_line(items: &[String]) -> String {
    items
        .iter()
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
    let violations = one_line(&s.violations);
    let warnings = one_line(&s.warnings);
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
                enforcement = s.enforcement.unwrap_or(""),
                warnings = warnings.as_str(),
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

/// Counts the decision (nothing for skipped requests).
pub(crate) fn count_decision(metrics: &DecisionMetrics, endpoint: Endpoint, s: &ReviewSummary) {
    if s.outcome == Outcome::Skipped {
        return;
    }
    let queue = s.queue.clone().unwrap_or_default();
    metrics
        .decisions
        .get_or_create(&DecisionLabels {
            endpoint: endpoint.as_str(),
            queue: queue.clone(),
            outcome: outcome_label(s),
        })
        .inc();
    for v in &s.violations {
        metrics
            .violations
            .get_or_create(&ViolationLabels {
                queue: queue.clone(),
                rule: violation_rule(v),
                enforcement: s.enforcement.unwrap_or("deny"),
            })
            .inc();
    }
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
                "queue \"gpu-queue\": spec...nvidia.com/gpu=8 is above the maximum 4 (variable \"gpus\")".into(),
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
            warnings: vec!["w\u{0}".into()],
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
            warnings: vec!["queue \"k8s-test\" is not configured".into()],
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
    fn violation_rules_name_the_config_key() {
        let q = "queue \"q\": ";
        for (msg, rule) in [
            (
                "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu=8 is above the maximum 4 (variable \"gpus\")",
                "variable:gpus",
            ),
            (
                "spec.template.spec.containers[0].image=\"x\" does not match the queue template's \"acme/{{image}}\" (variable \"image\")",
                "variable:image",
            ),
            (
                "spec.parallelism=9 is above the maximum 2 (field \"spec.parallelism\")",
                "field:spec.parallelism",
            ),
            (
                "total nvidia.com/gpu over all pods=16 is above the maximum 8 (totals) (spec.tasks[0].template: 2 × 8)",
                "totals",
            ),
            (
                "spec.x=1 differs from the queue template's 2 (strict)",
                "strict",
            ),
            (
                "activeDeadlineSeconds is not set; the queue allows at most 60 (maxActiveDeadlineSeconds), so set it",
                "maxActiveDeadlineSeconds",
            ),
            (
                "spec.activeDeadlineSeconds=99 exceeds maximum 60 (maxActiveDeadlineSeconds)",
                "maxActiveDeadlineSeconds",
            ),
            (
                "spec.template.spec.containers[0].image=\"evil.io/x\" is not from an allowed registry (allowedRegistries: ghcr.io/acme)",
                "allowedRegistries",
            ),
            (
                "namespace \"x\" is not allowed (allowedNamespaces: ml)",
                "allowedNamespaces",
            ),
            ("… and 3 more violations", "other"),
        ] {
            assert_eq!(violation_rule(&format!("{q}{msg}")), rule, "{msg}");
        }
        // A user's value cannot pick the label: the real source is the last marker.
        let crafted = format!(
            "{q}spec.image=\"a (variable \\\"random123\\\")\" is not from an allowed registry (allowedRegistries: x)"
        );
        assert_eq!(violation_rule(&crafted), "allowedRegistries");
        let crafted =
            format!("{q}x=\"(variable \\\"zz\\\")\" is above the maximum (variable \"gpus\")");
        assert_eq!(violation_rule(&crafted), "variable:gpus");
        // Odd names collapse to the bare rule.
        assert_eq!(
            violation_rule(&format!("{q}x (variable \"a b{{}}\")")),
            "variable"
        );
    }
}
