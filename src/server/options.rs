//! The options of `launchgate serve`: one struct that is both the command line (every flag also
//! an env var) and what [`super::start`] takes, so a flag is declared once.

use super::owner_cache::WatchScope;
use crate::native::webhooks::{Endpoint, MutateHook, Settings, ValidateHook};
use clap::builder::TypedValueParser as _;
use clap::{Args, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How `serve` writes its log lines (to stderr): `Text`, human-readable lines (coloured only on
/// a terminal), or `Json`, one JSON object per line with the event's fields at the top level.
// The variants carry no doc comments: clap would turn them into a second help layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
}

/// Everything `serve` needs: the HTTPS server's options, read by [`super::start`], and the
/// process settings `launchgate serve` applies before it (logging, runtime threads, the
/// cluster view), which `start` ignores.
///
/// The field docs are the `--help` texts. In-process (tests, embedding) build it with
/// `ServeOptions { listen, .., ..ServeOptions::default() }`: the defaults are the flags'
/// defaults. Durations given on the command line in seconds or milliseconds are floored as the
/// flags say (reload interval 1 s, read timeout and request deadline 100 ms); set in-process
/// they are used as given.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct ServeOptions {
    /// Address to listen on.
    #[arg(long, env = "LAUNCHGATE_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Config file (YAML). Without it the built-in example policy is used.
    #[arg(long, env = "LAUNCHGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Serving certificate (PEM chain). Without it a self-signed dev certificate is generated.
    #[arg(long, env = "LAUNCHGATE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Serving private key (PEM).
    #[arg(long, env = "LAUNCHGATE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (the API server's).
    #[arg(long, env = "LAUNCHGATE_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// Directory for the generated development certificate's CA bundle.
    #[arg(
        long,
        env = "LAUNCHGATE_DEV_CERT_DIR",
        default_value_os_t = default_dev_cert_dir(),
        hide_default_value = true
    )]
    pub dev_cert_dir: PathBuf,
    /// Extra DNS names or IPs for the development certificate (comma-separated).
    #[arg(long, env = "LAUNCHGATE_DEV_CERT_NAMES", value_delimiter = ',')]
    pub dev_cert_names: Vec<String>,
    /// Log format.
    #[arg(
        long,
        env = "LAUNCHGATE_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Log level filter (tracing EnvFilter syntax).
    #[arg(long, env = "LAUNCHGATE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Seconds to keep serving (unready) after SIGTERM before draining.
    #[arg(
        long,
        env = "LAUNCHGATE_SHUTDOWN_DELAY",
        default_value = "0",
        value_parser = clap::value_parser!(u64).map(Duration::from_secs)
    )]
    pub shutdown_delay: Duration,
    /// Seconds to wait for in-flight requests when draining.
    #[arg(
        long,
        env = "LAUNCHGATE_DRAIN_TIMEOUT",
        default_value = "10",
        value_parser = clap::value_parser!(u64).map(Duration::from_secs)
    )]
    pub drain_timeout: Duration,
    /// Milliseconds allowed for the TLS handshake, the headers and the body of a request.
    #[arg(
        long = "read-timeout-ms",
        value_name = "READ_TIMEOUT_MS",
        env = "LAUNCHGATE_READ_TIMEOUT_MS",
        default_value = "3000",
        value_parser = clap::value_parser!(u64).map(millis_at_least_100)
    )]
    pub read_timeout: Duration,
    /// Seconds between checks of the certificate and config files for changes.
    #[arg(
        long,
        env = "LAUNCHGATE_RELOAD_INTERVAL",
        default_value = "2",
        value_parser = clap::value_parser!(u64).map(|s| Duration::from_secs(s.max(1)))
    )]
    pub reload_interval: Duration,
    /// Admission requests processed at once; more wait (never rejected).
    #[arg(long, env = "LAUNCHGATE_MAX_CONCURRENCY", default_value_t = 512)]
    pub max_concurrency: usize,
    /// Milliseconds from a request's arrival by which it must be answered; keep it below the
    /// webhook's `timeoutSeconds` so the API server gets an answer instead of timing out.
    #[arg(
        long = "request-deadline-ms",
        value_name = "REQUEST_DEADLINE_MS",
        env = "LAUNCHGATE_REQUEST_DEADLINE_MS",
        default_value = "4000",
        value_parser = clap::value_parser!(u64).map(millis_at_least_100)
    )]
    pub request_deadline: Duration,
    /// MiB that admission reviews may hold at once (each is charged its body size times a
    /// measured cost factor; larger ones wait). Default: half of the container's memory limit
    /// after 48 MiB for the process, or 512 MiB without a limit.
    #[arg(
        long = "memory-budget-mib",
        value_name = "MEMORY_BUDGET_MIB",
        env = "LAUNCHGATE_MEMORY_BUDGET_MIB",
        value_parser = clap::value_parser!(u64).map(|mib| mib.saturating_mul(1 << 20))
    )]
    pub memory_budget: Option<u64>,
    /// Read owner Volcano Jobs, rendezvous Services and the PyTorchJobs a `pytorchjobs/scale`
    /// request scales through the Kubernetes API (cached watches).
    #[arg(long, env = "LAUNCHGATE_CLUSTER_LOOKUPS", default_value_t = false, action = clap::ArgAction::Set)]
    pub cluster_lookups: bool,
    /// Tokio worker threads (default: number of cores).
    #[arg(long, env = "LAUNCHGATE_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// Plain-HTTP address for /healthz, /readyz and /metrics (no TLS, no client certificate),
    /// e.g. 0.0.0.0:8080 for the kubelet's probes and Prometheus.
    #[arg(long, env = "LAUNCHGATE_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// Serve the cluster's LaunchQueues (`launchgate.io/v1alpha1`, cluster-scoped) as queues
    /// beside the config file's (one overrides the file's queue of its name), kept by a watch
    /// and enforced within seconds of a change, and write their status (the holder of the
    /// Lease `launchgate-launchqueues` in `--pod-namespace`); needs get, list, watch on
    /// launchqueues, patch on launchqueues/status and, in a pod, get, create, update on leases.
    #[arg(long = "launchqueues", env = "LAUNCHGATE_LAUNCHQUEUES", default_value_t = false, action = clap::ArgAction::Set)]
    pub launch_queues: bool,
    /// Write a Kubernetes Event (in the object's namespace) for every denied or warned launch
    /// workload; needs `create` on events.events.k8s.io.
    #[arg(long, env = "LAUNCHGATE_EVENTS", default_value_t = false, action = clap::ArgAction::Set)]
    pub events: bool,
    /// Keep the config's native admission policies (ValidatingAdmissionPolicy,
    /// MutatingAdmissionPolicy and bindings) in the cluster, as the set named here (the chart's
    /// `policyMode: native|hybrid`): a config is served once the set holds it, at start and after
    /// every reload. The set is --native-policy-slots slots, each the four objects
    /// `<set>-q<n>-mutate` and `<set>-q<n>-limits`, created dormant beforehand (the chart, or
    /// `compile-native --dormant-slots`); a queue's objects are written into a slot, a slot no
    /// queue holds is made dormant again. Needs get and update on those names only. Not ready
    /// while the set cannot be brought in step (/readyz says why). While the server's namespace
    /// (--pod-namespace) carries the annotation launchgate.io/bypass (the emergency bypass) every
    /// slot is kept dormant and no config is synced; needs get on that namespace.
    #[arg(long, env = "LAUNCHGATE_NATIVE_POLICIES")]
    pub native_policies: Option<String>,
    /// With --native-policies: how many queues the set has slots for. A config with more
    /// queues is refused: at start the server is never ready, on a reload the previous config
    /// keeps serving (and the server is not ready until another config is read).
    #[arg(
        long,
        env = "LAUNCHGATE_NATIVE_POLICY_SLOTS",
        default_value_t = crate::native::DEFAULT_POLICY_SLOTS,
        value_parser = parse_slots
    )]
    pub native_policy_slots: usize,
    /// The namespaceSelector (JSON) of every native binding: the namespaces the webhooks cover.
    #[arg(long, env = "LAUNCHGATE_NATIVE_NAMESPACE_SELECTOR", value_parser = parse_json_object)]
    pub native_namespace_selector: Option<serde_json::Value>,
    /// The Events' reportingInstance, and the pod Events about the server's own state regard
    /// (the chart passes the pod name); default: the hostname.
    #[arg(long, env = "LAUNCHGATE_POD_NAME")]
    pub pod_name: Option<String>,
    /// The namespace of the server's pod, where Events about its own state (the native
    /// policies' sync) are written; default: the pod's service account namespace in a pod,
    /// else no such Events.
    #[arg(long, env = "LAUNCHGATE_POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// The uid of the server's pod, so `kubectl describe pod` shows the Events about it.
    #[arg(long, env = "LAUNCHGATE_POD_UID")]
    pub pod_uid: Option<String>,
    /// With --cluster-lookups: watch Volcano Jobs, Services and PyTorchJobs only in these
    /// namespaces (comma-separated; empty: all namespaces).
    #[arg(long, env = "LAUNCHGATE_OWNER_WATCH_NAMESPACES", value_delimiter = ',')]
    pub owner_watch_namespaces: Vec<String>,
    /// With --cluster-lookups: watch only Volcano Jobs matching this label selector
    /// (e.g. wandb.ai/monitor; empty: every Job).
    #[arg(long, env = "LAUNCHGATE_OWNER_WATCH_SELECTOR", default_value = "")]
    pub owner_watch_selector: String,
    /// Export a trace span per admission request (a child span per phase) over OTLP/HTTP
    /// protobuf, configured by the standard OTEL_* variables: OTEL_EXPORTER_OTLP_ENDPOINT or
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (default http://localhost:4318),
    /// OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_CERTIFICATE,
    /// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and
    /// OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_MAX_QUEUE_SIZE and the other OTEL_BSP_* variables;
    /// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off. Without this flag no
    /// OTEL_* variable is read.
    #[arg(long, env = "LAUNCHGATE_OTLP_TRACES", default_value_t = false, action = clap::ArgAction::Set)]
    pub otlp_traces: bool,
    /// Who registers the webhook configurations, and how (`--register-webhooks`).
    #[command(flatten)]
    pub registration: RegistrationOptions,
}

/// `serve --register-webhooks`: the server creates and updates its own webhook configurations
/// once it is ready, so nothing routes launch workloads to launchgate before a replica can
/// answer. The config decides which queues fail closed; these flags give what it cannot know.
#[derive(Args, Debug, Clone, PartialEq)]
#[command(next_help_heading = "Webhook registration")]
pub struct RegistrationOptions {
    /// Once ready (HTTPS serving, policy loaded, certificate valid), server-side apply the
    /// MutatingWebhookConfiguration and ValidatingWebhookConfiguration named NAME (field
    /// manager `launchgate-webhook-registration`), again on every config change and certificate
    /// rotation; never deleted on shutdown (`delete-webhooks` removes them). The validating
    /// webhook is split per queue: queues with any deny rule fail closed, the others fail open.
    /// Needs get, create and patch on both kinds. While the server's namespace (--pod-namespace)
    /// carries the annotation launchgate.io/bypass (the emergency bypass) nothing is applied and
    /// the configurations' webhooks are removed; needs get on that namespace.
    #[arg(long, env = "LAUNCHGATE_REGISTER_WEBHOOKS", value_name = "NAME")]
    pub register_webhooks: Option<String>,
    /// Seconds after which the configurations are applied again although nothing changed (a
    /// deleted or edited configuration is restored within this); while the emergency bypass is
    /// on, nothing is applied whatever this says.
    #[arg(
        long = "webhook-resync-seconds",
        value_name = "WEBHOOK_RESYNC_SECONDS",
        env = "LAUNCHGATE_WEBHOOK_RESYNC_SECONDS",
        default_value = "60",
        value_parser = clap::value_parser!(u64).range(1..).map(Duration::from_secs)
    )]
    pub webhook_resync: Duration,
    /// The Service the API server calls: NAMESPACE/NAME:PORT.
    #[arg(
        long,
        env = "LAUNCHGATE_WEBHOOK_SERVICE",
        conflicts_with = "webhook_url"
    )]
    pub webhook_service: Option<Endpoint>,
    /// Or the base URL the API server calls (local clusters): `/mutate` and `/validate` are
    /// appended. Default: https://<--listen address> (127.0.0.1 for 0.0.0.0).
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_URL", hide_env_values = true)]
    pub webhook_url: Option<String>,
    /// PEM file with the CA bundle the API server verifies the serving certificate with
    /// (re-read on every check: a rotated CA is re-registered). Default: the generated
    /// development CA, else the --tls-cert chain.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_CA_BUNDLE")]
    pub webhook_ca_bundle: Option<PathBuf>,
    /// Or the CA bundle itself, base64 of the PEM (the chart's certs.external.caBundle).
    #[arg(
        long,
        env = "LAUNCHGATE_WEBHOOK_CA_BUNDLE_BASE64",
        conflicts_with = "webhook_ca_bundle",
        value_parser = parse_base64_pem
    )]
    pub webhook_ca_bundle_base64: Option<String>,
    /// The webhooks' namespaceSelector (JSON), e.g. the excluded system namespaces.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_NAMESPACE_SELECTOR", value_parser = parse_json_object)]
    pub webhook_namespace_selector: Option<serde_json::Value>,
    /// The webhooks' objectSelector (JSON).
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_OBJECT_SELECTOR", value_parser = parse_json_object)]
    pub webhook_object_selector: Option<serde_json::Value>,
    /// Seconds the API server waits for an answer (1..30).
    #[arg(
        long,
        env = "LAUNCHGATE_WEBHOOK_TIMEOUT_SECONDS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u8).range(1..=30)
    )]
    pub webhook_timeout_seconds: u8,
    /// matchPolicy of every webhook.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_MATCH_POLICY", default_value = "Equivalent", value_parser = ["Equivalent", "Exact"])]
    pub webhook_match_policy: String,
    /// The kinds sent (comma-separated); default: all.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_RULES", value_delimiter = ',', value_parser = WebhookRule)]
    pub webhook_rules: Vec<String>,
    /// Register the mutating webhook.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_MUTATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub webhook_mutate: bool,
    /// The mutating webhook's name.
    #[arg(
        long,
        env = "LAUNCHGATE_WEBHOOK_MUTATE_NAME",
        default_value = "mutate.launchgate.io"
    )]
    pub webhook_mutate_name: String,
    /// The mutating webhook's failurePolicy.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_MUTATE_FAILURE_POLICY", default_value = "Ignore", value_parser = ["Ignore", "Fail"])]
    pub webhook_mutate_failure_policy: String,
    /// The mutating webhook's reinvocationPolicy.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_REINVOCATION_POLICY", default_value = "IfNeeded", value_parser = ["IfNeeded", "Never"])]
    pub webhook_reinvocation_policy: String,
    /// Register the validating webhooks.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_VALIDATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub webhook_validate: bool,
    /// The validating webhook's name; split per queue it becomes <first label>-deny.<rest>
    /// (failurePolicy Fail) and <first label>-warn.<rest> (Ignore).
    #[arg(
        long,
        env = "LAUNCHGATE_WEBHOOK_VALIDATE_NAME",
        default_value = "validate.launchgate.io"
    )]
    pub webhook_validate_name: String,
    /// Fail: requests of queues with a deny rule fail closed, of the others open (split by
    /// matchConditions). Ignore: every validating request fails open (the chart's hybrid mode).
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_VALIDATE_FAILURE_POLICY", default_value = "Fail", value_parser = ["Fail", "Ignore"])]
    pub webhook_validate_failure_policy: String,
    /// Send only launch workloads (CEL matchConditions, Kubernetes >= 1.28). Off: every object
    /// of the kinds is sent and the validating webhook is not split.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_MATCH_CONDITIONS", default_value_t = true, action = clap::ArgAction::Set)]
    pub webhook_match_conditions: bool,
    /// Labels marking a launch workload (comma-separated); default: the config's launch and
    /// queue labels.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_LAUNCH_LABELS", value_delimiter = ',')]
    pub webhook_launch_labels: Vec<String>,
    /// Extra matchConditions (JSON list of {name, expression}) appended to the built-in ones.
    #[arg(long, env = "LAUNCHGATE_WEBHOOK_EXTRA_MATCH_CONDITIONS", value_parser = parse_json_list)]
    pub webhook_extra_match_conditions: Option<serde_json::Value>,
}

impl Default for RegistrationOptions {
    /// The flags' defaults.
    fn default() -> Self {
        flag_defaults()
    }
}

/// Why `url` cannot be a webhook base URL (`--webhook-url`), without quoting it: the API
/// server takes only `https://host[:port][/path]`, and the parts it refuses (userinfo, query,
/// fragment) are where a secret would be, which its refusal would quote on every retry.
pub fn check_webhook_url(url: &str) -> Result<(), String> {
    let mut problems: Vec<&str> = Vec::new();
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => rest,
        Some((scheme, rest)) => {
            problems.push(if scheme.eq_ignore_ascii_case("http") {
                "its scheme is http (the API server calls webhooks over https only)"
            } else {
                "its scheme is not https"
            });
            rest
        }
        None => {
            problems.push("it is not an https:// URL");
            url
        }
    };
    let before_query = rest.split(['?', '#']).next().unwrap_or_default();
    let host = before_query.split('/').next().unwrap_or_default();
    // An unescaped `/` or `@` in a password: any `@` before the query is userinfo to someone.
    if before_query.contains('@') {
        problems.push("it carries user information (user:password@), which the API server refuses");
    } else if host.is_empty() || host.starts_with(':') {
        problems.push("it names no host");
    }
    if rest.contains('?') {
        problems.push("it carries a query (?...), which the API server refuses");
    }
    if rest.contains('#') {
        problems.push("it carries a fragment (#...), which the API server refuses");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        problems.push("it contains whitespace or control characters");
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "--webhook-url must be https://host[:port][/path]: {} (the URL is not shown: \
             those parts may hold a secret)",
            problems.join("; ")
        ))
    }
}

impl RegistrationOptions {
    /// The flags that cannot be checked one by one: a `--webhook-url` the API server would
    /// refuse (see [`check_webhook_url`]).
    pub fn check(&self) -> anyhow::Result<()> {
        if let Some(url) = &self.webhook_url {
            check_webhook_url(url).map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    /// The settings of the webhooks named `name`, served at `listen` when no Service or URL is
    /// given, with `ca_bundle` (PEM).
    pub fn settings(&self, name: &str, listen: SocketAddr, ca_bundle: String) -> Settings {
        let endpoint = match (&self.webhook_service, &self.webhook_url) {
            (Some(service), _) => service.clone(),
            (None, Some(url)) => Endpoint::Url(url.clone()),
            (None, None) => {
                let ip = if listen.ip().is_unspecified() {
                    std::net::IpAddr::from([127, 0, 0, 1])
                } else {
                    listen.ip()
                };
                Endpoint::Url(format!("https://{}", SocketAddr::new(ip, listen.port())))
            }
        };
        Settings {
            name: name.to_string(),
            endpoint,
            ca_bundle,
            namespace_selector: self.webhook_namespace_selector.clone(),
            object_selector: self.webhook_object_selector.clone(),
            timeout_seconds: self.webhook_timeout_seconds,
            match_policy: self.webhook_match_policy.clone(),
            mutate: self.webhook_mutate.then(|| MutateHook {
                name: self.webhook_mutate_name.clone(),
                failure_policy: self.webhook_mutate_failure_policy.clone(),
                reinvocation_policy: self.webhook_reinvocation_policy.clone(),
            }),
            validate: self.webhook_validate.then(|| ValidateHook {
                name: self.webhook_validate_name.clone(),
                fail_closed: self.webhook_validate_failure_policy == "Fail",
            }),
            kinds: self
                .webhook_rules
                .iter()
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty())
                .collect(),
            launch_labels: self
                .webhook_launch_labels
                .iter()
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty())
                .collect(),
            match_conditions: self.webhook_match_conditions,
            // Whether the server reads LaunchQueues is the server's to say (`webhook_sync`).
            launch_queues: false,
            extra_conditions: self
                .webhook_extra_match_conditions
                .as_ref()
                .and_then(serde_json::Value::as_array)
                .cloned()
                .unwrap_or_default(),
        }
    }
}

impl Default for ServeOptions {
    /// The flags' defaults.
    fn default() -> Self {
        flag_defaults()
    }
}

/// Options as a command line without flags gives them, the environment not read: each default
/// is declared once, on its flag.
fn flag_defaults<T: Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("serve")).mut_args(|arg| arg.env(None));
    command
        .try_get_matches_from(["serve"])
        .and_then(|matches| T::from_arg_matches(&matches))
        .expect("the flags' defaults parse")
}

impl ServeOptions {
    /// The part of the cluster the owner Volcano Job watch covers (`--owner-watch-*`), blank
    /// namespace names dropped.
    pub fn watch_scope(&self) -> WatchScope {
        WatchScope {
            namespaces: self
                .owner_watch_namespaces
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect(),
            label_selector: self.owner_watch_selector.clone(),
        }
    }
}

/// Where the development certificate's CA bundle goes without `--dev-cert-dir`.
fn default_dev_cert_dir() -> PathBuf {
    std::env::temp_dir().join("launchgate-dev-certs")
}

/// `--native-policy-slots` (`serve`, `check-config`): 1..=[`crate::native::MAX_POLICY_SLOTS`].
pub(crate) fn parse_slots(text: &str) -> Result<usize, String> {
    let max = crate::native::MAX_POLICY_SLOTS;
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{text:?} is not a number of slots from 1 to {max}")),
    }
}

/// A millisecond flag, at least 100 ms (a shorter read timeout or deadline fails every request).
fn millis_at_least_100(ms: u64) -> Duration {
    Duration::from_millis(ms.max(100))
}

/// A JSON object given on the command line.
/// A kind's name among the webhook's admission rules (`--webhook-rules`): one of the kind
/// registry's names ([`crate::kinds::KindSpec::webhook_rule`]), spaces around it ignored. The
/// names are clap's possible values, so `--help` and the command-line reference list them.
#[derive(Clone, Copy, Debug)]
struct WebhookRule;

impl clap::builder::TypedValueParser for WebhookRule {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let text = value.to_string_lossy();
        let name = text.trim();
        if name.is_empty() || crate::kinds::all().any(|k| k.webhook_rule == name) {
            return Ok(name.to_owned());
        }
        let mut err = clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd);
        if let Some(arg) = arg {
            err.insert(
                clap::error::ContextKind::InvalidArg,
                clap::error::ContextValue::String(arg.to_string()),
            );
        }
        err.insert(
            clap::error::ContextKind::InvalidValue,
            clap::error::ContextValue::String(name.to_owned()),
        );
        err.insert(
            clap::error::ContextKind::ValidValue,
            clap::error::ContextValue::Strings(
                crate::kinds::all()
                    .map(|k| k.webhook_rule.to_owned())
                    .collect(),
            ),
        );
        Err(err)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            crate::kinds::all().map(|k| clap::builder::PossibleValue::new(k.webhook_rule)),
        ))
    }
}

fn parse_json_object(text: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err("expected a JSON object".into()),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

/// Base64 of PEM certificates given on the command line: the PEM.
fn parse_base64_pem(text: &str) -> Result<String, String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("invalid base64: {e}"))?;
    let pem = String::from_utf8(bytes).map_err(|_| "not PEM text".to_string())?;
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err("holds no PEM certificate".into());
    }
    Ok(pem)
}

/// A JSON list of `{name, expression}` objects given on the command line.
fn parse_json_list(text: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Array(items)) => {
            for item in &items {
                if !(item["name"].is_string() && item["expression"].is_string()) {
                    return Err(format!(
                        "expected objects with a name and an expression, got {item}"
                    ));
                }
            }
            Ok(serde_json::Value::Array(items))
        }
        Ok(_) => Err("expected a JSON list".into()),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Serve {
        #[command(flatten)]
        options: ServeOptions,
    }

    fn parse(args: &[&str]) -> ServeOptions {
        Serve::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .expect("valid flags")
            .options
    }

    /// Run without `LAUNCHGATE_*` variables in the environment (they would be read as flags).
    /// The defaults the docs and the chart state are declared once, on the flags.
    #[test]
    fn the_in_process_default_is_the_command_line_default() {
        let defaults = ServeOptions::default();
        assert_eq!(parse(&[]), defaults);
        assert_eq!(defaults.listen.to_string(), "0.0.0.0:8443");
        assert_eq!(defaults.read_timeout, Duration::from_secs(3));
        assert_eq!(defaults.request_deadline, Duration::from_secs(4));
        assert_eq!(defaults.max_concurrency, 512);
        let registration = &defaults.registration;
        assert_eq!(registration.webhook_mutate_failure_policy, "Ignore");
        assert_eq!(registration.webhook_validate_failure_policy, "Fail");
        assert_eq!(registration.webhook_timeout_seconds, 5);
    }

    #[test]
    fn flags_in_seconds_milliseconds_and_mebibytes_become_durations_and_bytes() {
        let o = parse(&[
            "--shutdown-delay=5",
            "--drain-timeout=20",
            "--read-timeout-ms=1500",
            "--reload-interval=7",
            "--request-deadline-ms=2500",
            "--memory-budget-mib=64",
            "--owner-watch-namespaces=a, ,b",
            "--owner-watch-selector=wandb.ai/monitor",
        ]);
        assert_eq!(o.shutdown_delay, Duration::from_secs(5));
        assert_eq!(o.drain_timeout, Duration::from_secs(20));
        assert_eq!(o.read_timeout, Duration::from_millis(1500));
        assert_eq!(o.reload_interval, Duration::from_secs(7));
        assert_eq!(o.request_deadline, Duration::from_millis(2500));
        assert_eq!(o.memory_budget, Some(64 << 20));
        let scope = o.watch_scope();
        assert_eq!(scope.namespaces, ["a", "b"]);
        assert_eq!(scope.label_selector, "wandb.ai/monitor");
    }

    #[test]
    fn too_small_intervals_on_the_command_line_are_floored() {
        let o = parse(&[
            "--reload-interval=0",
            "--read-timeout-ms=5",
            "--request-deadline-ms=0",
        ]);
        assert_eq!(o.reload_interval, Duration::from_secs(1));
        assert_eq!(o.read_timeout, Duration::from_millis(100));
        assert_eq!(o.request_deadline, Duration::from_millis(100));
    }

    #[test]
    fn registration_flags_become_webhook_settings() {
        let o = parse(&[
            "--register-webhooks=lg",
            "--webhook-service=launchgate/lg:443",
            "--webhook-namespace-selector={\"matchLabels\":{\"a\":\"b\"}}",
            "--webhook-rules=jobs, pods",
            "--webhook-validate-failure-policy=Ignore",
            "--webhook-mutate=false",
            "--webhook-extra-match-conditions=[{\"name\":\"x\",\"expression\":\"true\"}]",
        ]);
        let r = &o.registration;
        assert_eq!(r.register_webhooks.as_deref(), Some("lg"));
        let s = r.settings("lg", o.listen, "PEM".into());
        assert_eq!(
            s.endpoint,
            Endpoint::Service {
                namespace: "launchgate".into(),
                name: "lg".into(),
                port: 443
            }
        );
        assert_eq!(s.kinds, ["jobs", "pods"]);
        let Err(err) = Serve::try_parse_from(["serve", "--webhook-rules=jobs,mpi"]) else {
            panic!("an unknown kind is refused");
        };
        assert!(err.to_string().contains("rayjob"), "{err}");
        assert!(s.mutate.is_none());
        assert!(!s.validate.unwrap().fail_closed);
        assert_eq!(s.extra_conditions.len(), 1);
        assert_eq!(s.namespace_selector.unwrap()["matchLabels"]["a"], "b");
        // Without a Service or URL: the listen address, loopback for 0.0.0.0.
        let s = parse(&["--listen=0.0.0.0:9443"]).registration.settings(
            "lg",
            "0.0.0.0:9443".parse().unwrap(),
            String::new(),
        );
        assert_eq!(s.endpoint, Endpoint::Url("https://127.0.0.1:9443".into()));
        for bad in [
            "--webhook-service=lg:443",
            "--webhook-timeout-seconds=31",
            "--webhook-extra-match-conditions=[1]",
            "--webhook-validate-failure-policy=Deny",
            "--webhook-ca-bundle-base64=bm90IHBlbQ==",
        ] {
            assert!(
                Serve::try_parse_from(["serve", bad]).is_err(),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn the_certificate_flags_come_in_pairs() {
        let err = Serve::try_parse_from(["serve", "--tls-cert=a.crt"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn a_webhook_url_the_api_server_refuses_is_refused_without_quoting_it() {
        for (url, problem) in [
            ("https://user:pw@host:8443/x", "user information"),
            ("https://host/?token=s3cret", "query"),
            ("https://host/base#s3cret", "fragment"),
            ("http://host:8443", "http"),
            ("ftp://host", "not https"),
            ("host:8443", "not an https:// URL"),
            ("https:///path", "no host"),
            ("https://:8443", "no host"),
            ("https://ho st", "whitespace"),
            // A password with an unescaped `/`: still userinfo.
            ("https://u:pa/ss@host", "user information"),
        ] {
            let o = parse(&[&format!("--webhook-url={url}")]);
            let err = o.registration.check().expect_err(url).to_string();
            assert!(err.contains(problem), "{url}: {err}");
            assert!(err.contains("--webhook-url"), "{err}");
            for secret in ["pw", "s3cret", "ss@"] {
                assert!(!err.contains(secret), "{url}: {err}");
            }
        }
        let all = check_webhook_url("http://u:pw@h/?q=1#f").unwrap_err();
        for problem in ["http", "user information", "query", "fragment"] {
            assert!(all.contains(problem), "{all}");
        }
        for good in [
            "https://127.0.0.1:8443",
            "https://[::1]:8443/base",
            "HTTPS://webhook.example:443/lg",
        ] {
            assert_eq!(check_webhook_url(good), Ok(()), "{good}");
        }
        assert!(parse(&[]).registration.check().is_ok());
    }

    #[test]
    fn native_policy_slots_are_bounded() {
        assert_eq!(parse(&["--native-policy-slots=3"]).native_policy_slots, 3);
        for bad in ["0", "257", "many", "-1"] {
            assert!(
                Serve::try_parse_from(["serve", &format!("--native-policy-slots={bad}")]).is_err(),
                "{bad}"
            );
        }
    }
}
