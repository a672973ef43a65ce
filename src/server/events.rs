//! Kubernetes Events about denied and warned launch workloads (`serve --events`).
//!
//! A denial or a warning is also written as an `events.k8s.io/v1` Event in the object's
//! namespace, regarding the object (kind, namespace, name — or no name for a CREATE that relies
//! on `generateName` — and its uid on UPDATE), related to its controlling owner (the Job of a
//! controller-made pod), with reason `LaunchgateDenied` or `LaunchgateWarning`, type `Warning`,
//! the message as the note (cut to the API's 1 kB), the ids of the rules that denied or warned
//! in the annotation [`RULES_ANNOTATION`] (`limits.variables,guardrails.gang`; absent when no
//! rule did, e.g. for a warning of a mutation) and reporting controller `launchgate`. So
//! `kubectl describe` and tools that read Events show why. Never for `dryRun` requests, and never
//! for audit-only violations (those are silent by design: logged and counted).
//!
//! Emitting never slows an admission answer: the request path only does a non-blocking
//! `try_send` into a bounded queue ([`QUEUE_CAPACITY`]); a background task creates the Events.
//! When the queue is full the Event is dropped and counted
//! (`launchgate_events_total{result="dropped"}`). The task also drops repeats — the same
//! reason and message about the same object within [`DEDUP_WINDOW`] (the mutating and the
//! validating webhook often warn alike; a retried CREATE is denied alike) — and keeps to
//! [`RATE_PER_SECOND`] Events per second (burst [`BURST`]) so a storm of denials cannot
//! flood the API server.
//!
//! The API client is [`kube::Client::try_default`]: the pod's service account in a cluster
//! (RBAC: `create` on `events` in `events.k8s.io`), else `KUBECONFIG` / `~/.kube/config`,
//! exactly like `--cluster-lookups`. It is created only when Events are on. Tests can hand
//! [`EventRecorder::start`] any [`EventSink`].

use super::metrics::DecisionMetrics;
use crate::review::{Outcome, ReviewSummary};
use crate::rules::Effect;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Events waiting to be created; more are dropped (and counted).
pub(crate) const QUEUE_CAPACITY: usize = 256;
/// The same reason and message about the same object is emitted once per window.
pub(crate) const DEDUP_WINDOW: Duration = Duration::from_secs(300);
/// Sustained Events per second.
pub(crate) const RATE_PER_SECOND: f64 = 5.0;
/// Events allowed at once after a quiet period.
pub(crate) const BURST: f64 = 20.0;
/// The API's limit on `note` (bytes).
pub(crate) const NOTE_LIMIT: usize = 1024;
/// `reportingController` of every Event.
pub(crate) const REPORTING_CONTROLLER: &str = "launchgate";
/// Longest wait for the API server to create one Event.
const CREATE_TIMEOUT: Duration = Duration::from_secs(5);

/// `Warning` Event reasons.
pub const REASON_DENIED: &str = "LaunchgateDenied";
pub(crate) const REASON_WARNING: &str = "LaunchgateWarning";
/// The Event annotation listing the ids of the rules ([`crate::rules`]) that denied or warned,
/// comma-separated in the order the message names them.
pub const RULES_ANNOTATION: &str = "launchgate.io/rules";

/// Where Events go: the Kubernetes API, or a test's list.
#[async_trait::async_trait]
pub trait EventSink: Send + Sync + 'static {
    /// Creates one Event in the cluster.
    async fn create(&self, event: &Event) -> Result<(), String>;
}

/// Creates Events through the Kubernetes API.
pub(crate) struct KubeEventSink {
    client: kube::Client,
}

impl KubeEventSink {
    /// Creates Events with `client`.
    pub(crate) fn new(client: kube::Client) -> Self {
        KubeEventSink { client }
    }

    /// The in-cluster service account, else `KUBECONFIG` / `~/.kube/config`.
    pub(crate) async fn try_default() -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let client = kube::Client::try_default()
            .await
            .context("--events: connecting to the Kubernetes API")?;
        Ok(KubeEventSink { client })
    }
}

#[async_trait::async_trait]
impl EventSink for KubeEventSink {
    async fn create(&self, event: &Event) -> Result<(), String> {
        let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
        let api: kube::Api<Event> = kube::Api::namespaced(self.client.clone(), namespace);
        api.create(&kube::api::PostParams::default(), event)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// What one Event says, before the background task stamps and names it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PendingEvent {
    pub(crate) namespace: String,
    pub(crate) regarding: ObjectReference,
    pub(crate) related: Option<ObjectReference>,
    pub(crate) reason: &'static str,
    pub(crate) note: String,
    /// The ids of the rules behind the note.
    pub(crate) rules: Vec<&'static str>,
    /// Base of the Event's name: the object's name or generateName.
    pub(crate) name_base: String,
}

impl PendingEvent {
    /// The Event a decision calls for: denials and warnings of non-dry-run requests about
    /// namespaced objects; `None` otherwise.
    pub(crate) fn for_decision(s: &ReviewSummary) -> Option<Self> {
        if s.dry_run || s.outcome == Outcome::Skipped || s.namespace.is_empty() {
            return None;
        }
        let (reason, note, effect) = match (&s.message, s.outcome) {
            (Some(message), Outcome::Denied) => (REASON_DENIED, message.clone(), Effect::Deny),
            _ if !s.warnings.is_empty() => {
                let lines: Vec<&str> = s.warnings.iter().map(|w| w.message.as_str()).collect();
                (REASON_WARNING, lines.join("\n"), Effect::Warn)
            }
            _ => return None,
        };
        // A denial names the rules that deny; a warning the ids of every warning given.
        let rules = match effect {
            Effect::Warn => crate::rules::warning_ids(&s.warnings),
            _ => crate::rules::ids(s.violations.iter().filter(|v| v.effect == effect)),
        };
        let reference = |api_version: &str, kind: &str, name: &str, uid: &str| {
            let some = |v: &str| (!v.is_empty()).then(|| v.to_string());
            ObjectReference {
                api_version: some(api_version),
                kind: some(kind),
                namespace: Some(s.namespace.clone()),
                name: some(name),
                uid: some(uid),
                ..ObjectReference::default()
            }
        };
        let regarding = reference(&s.api_version, &s.api_kind, &s.name, &s.object_uid);
        let related =
            (s.owner.as_ref()).map(|o| reference(&o.api_version, &o.kind, &o.name, &o.uid));
        let name_base = if s.name.is_empty() {
            s.generate_name.clone()
        } else {
            s.name.clone()
        };
        Some(PendingEvent {
            namespace: s.namespace.clone(),
            regarding,
            related,
            reason,
            note: truncate_note(&note),
            rules,
            name_base,
        })
    }

    /// The events.k8s.io/v1 Event, created at `now` by `instance`.
    pub(crate) fn to_event(&self, instance: &str, now: k8s_openapi::jiff::Timestamp) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(event_name(&self.name_base, now.as_nanosecond())),
                namespace: Some(self.namespace.clone()),
                annotations: (!self.rules.is_empty()).then(|| {
                    [(RULES_ANNOTATION.to_string(), self.rules.join(","))]
                        .into_iter()
                        .collect()
                }),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some("Warning".into()),
            reason: Some(self.reason.into()),
            action: Some(
                if self.reason == REASON_DENIED {
                    "Deny"
                } else {
                    "Warn"
                }
                .into(),
            ),
            note: Some(self.note.clone()),
            regarding: Some(self.regarding.clone()),
            related: self.related.clone(),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            // The API allows 128 bytes.
            reporting_instance: Some(instance.chars().take(128).collect()),
            ..Event::default()
        }
    }

    fn dedup_key(&self) -> String {
        let r = &self.regarding;
        format!(
            "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
            self.namespace,
            r.kind.as_deref().unwrap_or_default(),
            self.name_base,
            r.uid.as_deref().unwrap_or_default(),
            self.reason,
            self.note
        )
    }
}

/// The server's own pod, which Events about the server's state regard (`--pod-namespace`,
/// `--pod-name`, `--pod-uid`; the chart passes them from the downward API, so `kubectl
/// describe pod` shows them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OwnPod {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: Option<String>,
}

impl OwnPod {
    /// An Event of `type_` (`Normal`, `Warning`) about this pod, created at `now`.
    pub(crate) fn event(
        &self,
        type_: &str,
        reason: &str,
        action: &str,
        note: &str,
        now: k8s_openapi::jiff::Timestamp,
    ) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(event_name(&self.name, now.as_nanosecond())),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            action: Some(action.into()),
            note: Some(truncate_note(note)),
            regarding: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(self.namespace.clone()),
                name: Some(self.name.clone()),
                uid: self.uid.clone(),
                ..ObjectReference::default()
            }),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.name.chars().take(128).collect()),
            ..Event::default()
        }
    }
}

/// The note cut to the API's limit at a character boundary (with `…` when cut).
pub(crate) fn truncate_note(note: &str) -> String {
    if note.len() <= NOTE_LIMIT {
        return note.to_string();
    }
    let mut end = NOTE_LIMIT - '…'.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &note[..end])
}

/// `<base>.<nanoseconds in hex>`, a valid DNS subdomain whatever the base holds (at the
/// mutating webhook the API server has not validated the object's name yet): lower-case
/// letters and digits, any other run of characters one `-`, at most 200 of them.
pub(crate) fn event_name(base: &str, nanos: i128) -> String {
    let mut clean = String::new();
    for c in base.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            clean.push(c);
        } else if !clean.is_empty() && !clean.ends_with('-') {
            clean.push('-');
        }
        if clean.len() >= 200 {
            break;
        }
    }
    let clean = clean.trim_end_matches('-');
    let clean = if clean.is_empty() {
        REPORTING_CONTROLLER
    } else {
        clean
    };
    format!("{clean}.{:x}", nanos.max(0))
}

/// The request path's handle: hands Events to the background task without waiting.
#[derive(Clone)]
pub(crate) struct EventRecorder {
    tx: mpsc::Sender<PendingEvent>,
    metrics: DecisionMetrics,
}

impl EventRecorder {
    /// Starts the background task that creates Events through `sink`, as `instance`
    /// (the Event's `reportingInstance`: the pod name).
    pub(crate) fn start(
        sink: Arc<dyn EventSink>,
        instance: String,
        metrics: DecisionMetrics,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        tokio::spawn(run(rx, sink, instance, metrics.clone()));
        EventRecorder { tx, metrics }
    }

    /// Queues the Event this decision calls for, if any. Never blocks.
    pub(crate) fn record(&self, s: &ReviewSummary) {
        let Some(event) = PendingEvent::for_decision(s) else {
            return;
        };
        if self.tx.try_send(event).is_err() {
            self.metrics.event("dropped");
        }
    }
}

/// The `reportingInstance` when no pod name is given (`--pod-name`, which the chart sets from
/// the downward API): `HOSTNAME` (the pod name in a pod), else `launchgate`.
pub(crate) fn default_instance() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| REPORTING_CONTROLLER.into())
}

/// A token bucket.
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn take(&mut self, now: Instant) -> bool {
        let refill = now.duration_since(self.last).as_secs_f64() * RATE_PER_SECOND;
        self.tokens = (self.tokens + refill).min(BURST);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

async fn run(
    mut rx: mpsc::Receiver<PendingEvent>,
    sink: Arc<dyn EventSink>,
    instance: String,
    metrics: DecisionMetrics,
) {
    let mut seen: HashMap<String, Instant> = HashMap::new();
    let mut bucket = Bucket {
        tokens: BURST,
        last: Instant::now(),
    };
    while let Some(pending) = rx.recv().await {
        let now = Instant::now();
        if seen.len() > 4096 {
            seen.retain(|_, at| now.duration_since(*at) < DEDUP_WINDOW);
        }
        let key = pending.dedup_key();
        if seen
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < DEDUP_WINDOW)
        {
            metrics.event("deduplicated");
            continue;
        }
        if !bucket.take(now) {
            metrics.event("rate_limited");
            continue;
        }
        seen.insert(key, now);
        let event = pending.to_event(&instance, k8s_openapi::jiff::Timestamp::now());
        match tokio::time::timeout(CREATE_TIMEOUT, sink.create(&event)).await {
            Ok(Ok(())) => metrics.event("created"),
            Ok(Err(e)) => {
                metrics.event("failed");
                tracing::warn!(
                    namespace = pending.namespace.as_str(),
                    error = e.to_string().as_str(),
                    "creating a Kubernetes Event failed"
                );
            }
            Err(_) => {
                metrics.event("failed");
                tracing::warn!(
                    namespace = pending.namespace.as_str(),
                    "creating a Kubernetes Event timed out"
                );
            }
        }
    }
}

/// An [`EventSink`] that keeps what it is given (tests, and a stand-in for the API).
#[derive(Default)]
pub struct MemoryEventSink {
    /// The Events created, in order.
    pub events: std::sync::Mutex<Vec<Event>>,
}

#[async_trait::async_trait]
impl EventSink for MemoryEventSink {
    async fn create(&self, event: &Event) -> Result<(), String> {
        self.events
            .lock()
            .expect("not poisoned")
            .push(event.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::OwnerRef;

    fn denied_pod() -> ReviewSummary {
        ReviewSummary {
            kind: "Pod",
            operation: "CREATE",
            outcome: Outcome::Denied,
            queue: Some("gpu-queue".into()),
            namespace: "ml".into(),
            generate_name: "train-abc-".into(),
            api_kind: "Pod".into(),
            api_version: "v1".into(),
            owner: Some(OwnerRef {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: "train-abc".into(),
                uid: "job-uid".into(),
            }),
            message: Some("queue \"gpu-queue\": too many GPUs".into()),
            violations: vec![
                crate::rules::Violation::new(
                    crate::rules::LIMITS_TOTALS,
                    "queue \"gpu-queue\": too many GPUs",
                ),
                crate::rules::Violation::new(crate::rules::GUARDRAILS_COST_CEILING, "costly")
                    .effect(Effect::Warn),
            ],
            ..ReviewSummary::default()
        }
    }

    #[test]
    fn a_denial_becomes_a_warning_event_regarding_the_object_and_its_owner() {
        let p = PendingEvent::for_decision(&denied_pod()).unwrap();
        let now = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let e = p.to_event("launchgate-7d9-x", now);
        assert_eq!(e.metadata.namespace.as_deref(), Some("ml"));
        let name = e.metadata.name.clone().unwrap();
        assert!(name.starts_with("train-abc."), "{name}");
        assert_eq!(e.reason.as_deref(), Some(REASON_DENIED));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.action.as_deref(), Some("Deny"));
        assert_eq!(e.reporting_controller.as_deref(), Some("launchgate"));
        assert_eq!(e.reporting_instance.as_deref(), Some("launchgate-7d9-x"));
        assert_eq!(
            e.note.as_deref(),
            Some("queue \"gpu-queue\": too many GPUs")
        );
        assert!(e.event_time.is_some());
        // The rules that denied (not the one that only warned), by id.
        assert_eq!(
            e.metadata.annotations.as_ref().unwrap()[RULES_ANNOTATION],
            "limits.totals"
        );
        let r = e.regarding.unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("Pod"), Some("ml"), None),
            "a generateName object has no name yet"
        );
        let rel = e.related.unwrap();
        assert_eq!(
            (rel.kind.as_deref(), rel.name.as_deref()),
            (Some("Job"), Some("train-abc"))
        );
    }

    #[test]
    fn no_event_for_dry_run_allowed_audit_or_cluster_scoped() {
        let dry = ReviewSummary {
            dry_run: true,
            ..denied_pod()
        };
        assert!(PendingEvent::for_decision(&dry).is_none());
        let allowed = ReviewSummary {
            outcome: Outcome::Patched,
            message: None,
            ..denied_pod()
        };
        assert!(PendingEvent::for_decision(&allowed).is_none());
        let audit = ReviewSummary {
            outcome: Outcome::AllowedWithViolations,
            message: None,
            violations: vec![
                crate::rules::Violation::new(crate::rules::LIMITS_VARIABLES, "x")
                    .effect(Effect::Audit),
            ],
            enforcement: Some("audit"),
            ..denied_pod()
        };
        assert!(PendingEvent::for_decision(&audit).is_none());
        let warned = ReviewSummary {
            warnings: vec![
                crate::rules::Warning::new(crate::rules::CACHE_MOUNT_TAKEN, "w1"),
                crate::rules::Warning::new(crate::rules::QUEUE_UNKNOWN, "w2"),
            ],
            ..audit
        };
        let p = PendingEvent::for_decision(&warned).unwrap();
        assert_eq!((p.reason, p.note.as_str()), (REASON_WARNING, "w1\nw2"));
        // A warning Event names the ids of its warnings, not of the violations under audit.
        assert_eq!(p.rules, ["cache.mountTaken", "queue.unknown"]);
        let cluster = ReviewSummary {
            namespace: String::new(),
            ..denied_pod()
        };
        assert!(PendingEvent::for_decision(&cluster).is_none());
    }

    #[test]
    fn names_and_notes_fit_the_api() {
        assert_eq!(event_name("Demo_Job", 255), "demo-job.ff");
        assert_eq!(event_name("train-", 1), "train.1");
        assert_eq!(event_name("", 1), "launchgate.1");
        assert_eq!(event_name("-a.-b..c_", 1), "a-b-c.1");
        assert_eq!(event_name("Ünïcode", 2), "n-code.2");
        assert!(event_name(&"a".repeat(400), 1).len() < 253);
        let dns = |n: &str| {
            n.split('.').all(|seg| {
                !seg.is_empty()
                    && seg
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !seg.starts_with('-')
                    && !seg.ends_with('-')
            })
        };
        for base in ["x", "-", "a--b", "A.B-", "..", "日本", "job.name.with.dots"] {
            assert!(
                dns(&event_name(base, 7)),
                "{base} -> {}",
                event_name(base, 7)
            );
        }
        let long = "é".repeat(1000);
        let cut = truncate_note(&long);
        assert!(cut.len() <= NOTE_LIMIT && cut.ends_with('…'));
        assert_eq!(truncate_note("short"), "short");
    }

    #[tokio::test]
    async fn repeats_are_dropped_and_the_rate_is_bounded() {
        let metrics = crate::server::metrics::Metrics::new();
        let sink = Arc::new(MemoryEventSink::default());
        let recorder = EventRecorder::start(sink.clone(), "test".into(), metrics.decisions.clone());
        // The same denial twice (mutate and validate), then 60 different ones.
        recorder.record(&denied_pod());
        recorder.record(&denied_pod());
        for i in 0..60 {
            recorder.record(&ReviewSummary {
                message: Some(format!("denial {i}")),
                ..denied_pod()
            });
        }
        let text = || metrics.encode();
        for _ in 0..200 {
            if text().contains("launchgate_events_total{result=\"rate_limited\"}") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let created = sink.events.lock().unwrap().len();
        assert!(
            (BURST as usize..=BURST as usize + 2).contains(&created),
            "burst then rate limit: {created}"
        );
        let t = text();
        assert!(
            t.contains("launchgate_events_total{result=\"deduplicated\"} 1"),
            "{t}"
        );
        assert!(t.contains("launchgate_events_total{result=\"rate_limited\"}"));
    }
}
