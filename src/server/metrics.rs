//! Prometheus metrics (text exposition via `prometheus-client`).

use crate::review::{Endpoint, ReviewSummary};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use std::sync::atomic::AtomicI64;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub(crate) endpoint: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) operation: &'static str,
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EndpointLabels {
    pub(crate) endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorLabels {
    pub(crate) endpoint: &'static str,
    pub(crate) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub(crate) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ConfigLabels {
    /// sha256 of the loaded config file (of the built-in policy without one).
    pub(crate) hash: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct QueueLabels {
    pub(crate) queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub(crate) reason: &'static str,
}

/// Why the native policy set is not in step
/// (`launchgate_native_policy_sync_failing{reason}`; `server::native_sync`).
pub(crate) const NATIVE_SYNC_FAILURES: [&str; 3] =
    ["too_many_queues", "missing_objects", "api_error"];

/// The results of a config or certificate reload.
pub(crate) const RELOAD_RESULTS: [&str; 2] = ["success", "failure"];

/// The results of an Event (`launchgate_events_total{result}`).
pub(crate) const EVENT_RESULTS: [&str; 5] = [
    "created",
    "failed",
    "dropped",
    "deduplicated",
    "rate_limited",
];

/// The standard `process_*` metrics every Prometheus exporter has (CPU, memory, file
/// descriptors, threads, start time), read from the OS on each scrape by the maintained
/// `metrics-process` collector.
#[derive(Debug)]
struct ProcessCollector;

impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let m = metrics_process::collector::collect();
        if let Some(cpu) = m.cpu_seconds_total {
            let counter = ConstCounter::new(cpu);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_open_fds",
                "Number of open file descriptors.",
                m.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                m.max_fds,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                m.virtual_memory_bytes,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                m.resident_memory_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                m.start_time_seconds,
            ),
            (
                "process_threads",
                "Number of OS threads in the process.",
                m.threads,
            ),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value.and_then(|v| i64::try_from(v).ok()) else {
                continue;
            };
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

/// Registers a new metric under `name` and returns it.
fn registered<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    registered_with(registry, name, help, M::default())
}

/// Registers `metric` under `name` and returns it.
fn registered_with<M: Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// All metrics of the server.
pub(crate) struct Metrics {
    pub(crate) registry: Registry,
    /// The `process_*` metrics, unprefixed as every exporter names them.
    process: Registry,
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) request_errors: Family<ErrorLabels, Counter>,
    pub(crate) latency: Family<EndpointLabels, Histogram>,
    pub(crate) patch_operations: Family<EndpointLabels, Counter>,
    pub(crate) audit_violations: Family<QueueLabels, Counter>,
    pub(crate) in_flight: Gauge,
    pub(crate) config_reloads: Family<ResultLabels, Counter>,
    pub(crate) config_last_reload_successful: Gauge,
    pub(crate) config_info: Family<ConfigLabels, Gauge>,
    pub(crate) cert_reloads: Family<ResultLabels, Counter>,
    pub(crate) cert_not_after: Gauge<i64, AtomicI64>,
    /// The native policy set (`--native-policies`): its slots, the queues asking for them, and
    /// why it is not in step.
    pub(crate) native_slots: Gauge,
    pub(crate) native_queues: Gauge,
    pub(crate) native_sync_failing: Family<ReasonLabels, Gauge>,
    /// 1 while the emergency bypass is on ([`super::bypass`]).
    pub(crate) emergency_bypass: Gauge,
    /// Decisions by queue and outcome, violations by rule, build info, Events.
    pub(crate) decisions: DecisionMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("launchgate");
        let mut process = Registry::default();
        process.register_collector(Box::new(ProcessCollector));
        let metrics = Metrics {
            requests: registered(
                &mut registry,
                "admission_requests",
                "Admission requests by endpoint, kind, operation and outcome",
            ),
            request_errors: registered(
                &mut registry,
                "admission_request_errors",
                "Requests not reviewed: answered with an HTTP error (bad body, wrong content type, too large, timeout), or denied unreviewed (too_dense: the object could never fit the memory budget; too_slow: reviewing it would outlast the request deadline)",
            ),
            latency: registered_with(
                &mut registry,
                "admission_duration_seconds",
                "Time to answer an admission request (body read to response), seconds",
                Family::new_with_constructor(|| {
                    // Up to the longest request deadline the webhook timeout allows (30 s), so a
                    // request answered near the deadline is still told apart from a fast one.
                    Histogram::new([
                        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1,
                        0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    ])
                }),
            ),
            patch_operations: registered(
                &mut registry,
                "patch_operations",
                "JSON Patch operations returned",
            ),
            audit_violations: registered(
                &mut registry,
                "audit_violations",
                "Limit violations allowed under audit enforcement, by queue",
            ),
            in_flight: registered(
                &mut registry,
                "admission_in_flight",
                "Admission requests being processed",
            ),
            config_reloads: registered(
                &mut registry,
                "config_reloads",
                "Config file reloads by result (success, failure)",
            ),
            config_last_reload_successful: registered(
                &mut registry,
                "config_last_reload_successful",
                "1 when the last config load or reload succeeded, 0 when the config file on disk was rejected (the previous policy is still in force)",
            ),
            config_info: registered(
                &mut registry,
                "config_info",
                "The config in force: always 1, labelled with its sha256 (compare across pods)",
            ),
            cert_reloads: registered(
                &mut registry,
                "certificate_reloads",
                "TLS certificate reloads by result (success, failure)",
            ),
            cert_not_after: registered(
                &mut registry,
                "certificate_not_after_timestamp_seconds",
                "notAfter of the serving certificate (alert well before it passes)",
            ),
            native_slots: registered(
                &mut registry,
                "native_policy_slots",
                "Slots of the native admission policy set the server keeps (--native-policies, --native-policy-slots): how many queues it can hold; 0 without native policies",
            ),
            native_queues: registered(
                &mut registry,
                "native_policy_queues",
                "Queues of the config last read, each needing a native policy slot; a config with more queues than native_policy_slots is refused",
            ),
            native_sync_failing: registered(
                &mut registry,
                "native_policy_sync_failing",
                "1 while the native admission policies cannot be brought in step with the config, by reason (too_many_queues: the config on disk has more queues than slots and is refused; missing_objects: a slot object is not in the cluster; api_error: reading or replacing one failed), else 0; the server is not ready meanwhile",
            ),
            emergency_bypass: registered(
                &mut registry,
                "emergency_bypass",
                "1 while the emergency bypass is on (the release namespace carries the launchgate.io/bypass annotation): the server registers no webhook and keeps its native policy slots dormant; else 0",
            ),
            decisions: DecisionMetrics::register(&mut registry),
            registry,
            process,
        };
        // Every series a shipped alert reads exists from start-up at 0: `increase()` of a
        // series that appears with its first failure is no increase, and the alert would miss
        // it.
        for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
            drop(metrics.latency.get_or_create(&EndpointLabels {
                endpoint: endpoint.as_str(),
            }));
            for reason in super::error::AdmissionError::REASONS {
                drop(metrics.request_errors.get_or_create(&ErrorLabels {
                    endpoint: endpoint.as_str(),
                    reason,
                }));
            }
        }
        for reason in NATIVE_SYNC_FAILURES {
            drop(
                metrics
                    .native_sync_failing
                    .get_or_create(&ReasonLabels { reason }),
            );
        }
        for result in RELOAD_RESULTS {
            drop(
                metrics
                    .config_reloads
                    .get_or_create(&ResultLabels { result }),
            );
            drop(metrics.cert_reloads.get_or_create(&ResultLabels { result }));
        }
        metrics
    }

    /// The registry with one series in every family, so its encoding names every metric's
    /// labels: what the metrics reference page is written from (`crate::reference`). A family
    /// added without a series here is reported by that page's generator.
    pub(crate) fn with_example_series() -> Self {
        let m = Self::new();
        let queue = || "<queue>".to_owned();
        drop(m.requests.get_or_create(&RequestLabels {
            endpoint: "<endpoint>",
            kind: "<kind>",
            operation: "<operation>",
            outcome: "<outcome>",
        }));
        let ep = EndpointLabels {
            endpoint: "<endpoint>",
        };
        drop(m.patch_operations.get_or_create(&ep));
        drop(
            m.audit_violations
                .get_or_create(&QueueLabels { queue: queue() }),
        );
        m.config_loaded("<sha256>".into());
        drop(
            m.native_sync_failing
                .get_or_create(&ReasonLabels { reason: "<reason>" }),
        );
        drop(m.decisions.decisions.get_or_create(&DecisionLabels {
            endpoint: "<endpoint>",
            queue: queue(),
            outcome: "<outcome>",
        }));
        drop(m.decisions.violations.get_or_create(&ViolationLabels {
            queue: queue(),
            rule: "<rule>",
            enforcement: "<enforcement>",
        }));
        drop(m.decisions.warnings.get_or_create(&WarningLabels {
            queue: queue(),
            rule: "<rule>",
        }));
        m
    }

    /// Records the config in force (its hash) after a successful load or reload.
    pub(crate) fn config_loaded(&self, hash: String) {
        self.config_last_reload_successful.set(1);
        self.config_info.clear();
        self.config_info
            .get_or_create(&ConfigLabels { hash })
            .set(1);
    }

    /// Counts an answered review: the request by endpoint, kind, operation and outcome, its
    /// latency, its patch operations and its audit-mode limit violations.
    pub(crate) fn count_review(&self, endpoint: Endpoint, s: &ReviewSummary, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.as_str(),
                kind: s.kind,
                operation: s.operation,
                outcome: s.outcome.as_str(),
            })
            .inc();
        let ep = EndpointLabels {
            endpoint: endpoint.as_str(),
        };
        self.latency
            .get_or_create(&ep)
            .observe(elapsed.as_secs_f64());
        if s.patch_operations > 0 {
            self.patch_operations
                .get_or_create(&ep)
                .inc_by(s.patch_operations as u64);
        }
        let audited = s.audit_violations().count();
        if audited > 0 {
            let queue = s.queue.clone().unwrap_or_default();
            self.audit_violations
                .get_or_create(&QueueLabels { queue })
                .inc_by(audited as u64);
        }
    }

    /// Counts a request answered with an HTTP error, by its reason.
    pub(crate) fn count_error(&self, endpoint: Endpoint, reason: &'static str) {
        self.request_errors
            .get_or_create(&ErrorLabels {
                endpoint: endpoint.as_str(),
                reason,
            })
            .inc();
    }

    pub(crate) fn encode(&self) -> String {
        use prometheus_client::encoding::text;
        let mut out = String::new();
        text::encode_registry(&mut out, &self.registry)
            .and_then(|()| text::encode_registry(&mut out, &self.process))
            .and_then(|()| text::encode_eof(&mut out))
            .expect("writing to a String cannot fail");
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Decisions (what the decision log says, as numbers), build info and Kubernetes Events.

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DecisionLabels {
    pub(crate) endpoint: &'static str,
    pub(crate) queue: String,
    /// `denied`, `warned`, `patched` or `allowed` (see [`super::decision::outcome_label`]).
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ViolationLabels {
    pub(crate) queue: String,
    /// The violated rule's id ([`crate::rules`]), e.g. `limits.variables`, `guardrails.gang`.
    pub(crate) rule: &'static str,
    pub(crate) enforcement: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WarningLabels {
    pub(crate) queue: String,
    /// The id of the warning's rule or notice ([`crate::rules`]), e.g. `cache.mountTaken`.
    pub(crate) rule: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BuildLabels {
    pub(crate) version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EventLabels {
    /// `created`, `failed`, `dropped` (queue full), `deduplicated`, `rate_limited`.
    pub(crate) result: &'static str,
}

/// Metrics of each non-skipped decision and of the Events emitted about them.
#[derive(Clone)]
pub(crate) struct DecisionMetrics {
    pub(crate) decisions: Family<DecisionLabels, Counter>,
    pub(crate) violations: Family<ViolationLabels, Counter>,
    pub(crate) warnings: Family<WarningLabels, Counter>,
    pub(crate) events: Family<EventLabels, Counter>,
}

impl DecisionMetrics {
    fn register(registry: &mut Registry) -> Self {
        let metrics = DecisionMetrics {
            decisions: registered(
                registry,
                "decisions",
                "Decisions on launch workloads by endpoint, queue and outcome (denied, warned, patched, allowed)",
            ),
            violations: registered(
                registry,
                "violations",
                "Rule violations (queue limits, guardrails, launchgate's own denials) by queue, rule id and enforcement (deny, warn, audit)",
            ),
            warnings: registered(
                registry,
                "warnings",
                "Warnings given to clients, by queue and the id of their rule or notice (one per warning shown, a violation answered with a warning included)",
            ),
            events: registered(
                registry,
                "events",
                "Kubernetes Events about denied and warned workloads, by result",
            ),
        };
        for result in EVENT_RESULTS {
            drop(metrics.events.get_or_create(&EventLabels { result }));
        }
        // Registered once and set; the registry keeps it.
        let build_info = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; the labels tell the running version",
            build_info.clone(),
        );
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        metrics
    }

    /// Counts one Event outcome.
    pub(crate) fn event(&self, result: &'static str) {
        self.events.get_or_create(&EventLabels { result }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_metrics_are_exported_unprefixed_after_the_servers_own() {
        let text = Metrics::new().encode();
        for line in [
            "# TYPE process_cpu_seconds counter",
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(line), "missing {line:?}");
        }
        assert!(text.contains("launchgate_admission_in_flight "));
        assert!(!text.contains("launchgate_process_"));
        assert!(text.trim_end().ends_with("# EOF"));
        assert_eq!(text.matches("# EOF").count(), 1);
        let rss: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.trim().parse().ok())
            .expect("an RSS figure");
        assert!(rss > 1 << 20, "{rss}");
    }
}
