//! The command line: `serve`, the offline `mutate` / `validate`, `test` (policy test suites),
//! `audit` (judge what runs in a cluster), `playground` (a local page to try a policy),
//! `check-config`, `print-default-config` and `certs`.
//! Every flag can also be set from an env var.

/// `print!` to stdout that returns an error instead of panicking when the reader has gone
/// (`launchgate mutate -f job.yaml | head`): see [`stdout_closed`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*).map_err($crate::cli::StdoutClosed::check)
    }};
}

/// `println!` to stdout, as [`out!`].
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::cli::StdoutClosed::check)
    }};
}

pub(crate) mod audit;
pub(crate) mod import_queue;
pub(crate) mod inputs;
pub(crate) mod playground;
pub(crate) mod test_suite;

use crate::admission::AdmissionReviewResponse;
use crate::policy::{DEFAULT_CONFIG_YAML, Policy};
use crate::review::{Endpoint, decide};
use crate::server::{LogFormat, ServeOptions, load_policy};
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use inputs::describe;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "launchgate",
    version,
    about = "Admission webhook for ML launch workloads"
)]
/// The command line: `launchgate <command> …`.
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run the HTTPS admission server.
    Serve(Box<ServeOptions>),
    /// Show what the mutating webhook would do to manifests (no cluster needed).
    Mutate(MutateArgs),
    /// Judge manifests as the cluster would: launchgate's mutation first, then validation of
    /// the mutated object. Exits 1 if any is denied.
    Validate(ValidateArgs),
    /// Run policy test suites (launchgate-test.yaml files found in the directories).
    /// Exits 0 when every expectation holds, 1 when one fails, 2 on bad input.
    Test(test_suite::TestArgs),
    /// Judge the launch workloads running in a cluster against a config (read-only; optionally
    /// writes wgpolicyk8s.io PolicyReports). Exits 1 if any would be denied.
    Audit(audit::AuditArgs),
    /// Check a config file and print which controllers' identities it trusts for each kind, and
    /// why (`match.podCreators`, or the upstream controller's built-in identity); exits non-zero
    /// with the offending key path.
    CheckConfig {
        /// The config file; `-` for stdin.
        file: PathBuf,
        /// The slots of the native policy set the config is for (`serve --native-policies`,
        /// the chart's `policyMode: native|hybrid` and `nativePolicySlots`): a config with more
        /// queues is refused, as `serve` refuses it. Read from LAUNCHGATE_NATIVE_POLICY_SLOTS
        /// too, so in a native or hybrid pod it is the pod's. Without it, a config with more
        /// queues than the default 16 slots is only warned about: it is valid for the webhook.
        #[arg(long, env = "LAUNCHGATE_NATIVE_POLICY_SLOTS", value_parser = crate::server::parse_slots)]
        native_policy_slots: Option<usize>,
    },
    /// Compile the policy to native admission policies (ValidatingAdmissionPolicy,
    /// MutatingAdmissionPolicy and their bindings) for `kubectl apply`; `--report` says, per
    /// queue, what stays in the webhook and why.
    CompileNative(NativeArgs),
    /// Print a shell completion script (`source <(launchgate completion bash)`).
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the built-in example config, a starting point for your own.
    PrintDefaultConfig,
    /// Print a config file's queues as LaunchQueue manifests (`launchgate.io/v1alpha1`), to move
    /// them from the file to the cluster (`| kubectl apply -f -`).
    ExportLaunchqueues {
        /// The config file (default: the built-in example config); `-` for stdin.
        #[arg(long, env = "LAUNCHGATE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Turn a W&B queue (UI config, queue export, Terraform wandb_run_queue) into a launchgate
    /// queue snippet; prints what it will enforce, one line per limit.
    ImportQueue(import_queue::ImportQueueArgs),
    /// Serve a local page to try a policy (launchgate config or W&B queue) on manifests: the
    /// verdict, warnings, the patch as a diff and which rule said what. Loopback only.
    Playground(playground::PlaygroundArgs),
    /// Generate a CA and a serving certificate for a Service DNS name.
    Certs(CertsArgs),
    /// Delete webhook configurations and native policies (the chart's pre-delete hook, before
    /// the pods go).
    DeleteWebhooks(DeleteWebhooksArgs),
}

/// Output format of `compile-native`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NativeFormat {
    /// YAML documents (`---` between objects); the report as Markdown.
    Yaml,
    /// One JSON `List` of the objects; the report as JSON.
    Json,
}

#[derive(Args, Debug)]
pub(crate) struct NativeArgs {
    /// Config file (default: the built-in example policy); `-` for stdin.
    #[arg(long, env = "LAUNCHGATE_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    pub(crate) output: NativeFormat,
    /// Print the report (per queue: what runs natively, what stays in the webhook and why)
    /// instead of the objects.
    #[arg(long, conflicts_with = "equivalent_config")]
    pub(crate) report: bool,
    /// Print the config that makes the webhook decide exactly as the native policies (what
    /// stays in the webhook turned off), to compare the two.
    #[arg(long)]
    pub(crate) equivalent_config: bool,
    /// Print instead the objects of a native policy set of this many slots, dormant (matching
    /// nothing): what `serve --native-policies=<set> --native-policy-slots=<n>` writes queues
    /// into, for an admin to create once (`| kubectl create -f -`) where the chart does not.
    #[arg(
        long,
        value_name = "SLOTS",
        requires = "policy_set",
        conflicts_with_all = ["report", "equivalent_config"],
        value_parser = crate::server::parse_slots
    )]
    pub(crate) dormant_slots: Option<usize>,
    /// The set of --dormant-slots (`serve --native-policies`; the chart's release name).
    #[arg(long, value_name = "SET", requires = "dormant_slots")]
    pub(crate) policy_set: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct DeleteWebhooksArgs {
    /// MutatingWebhookConfiguration to delete (repeatable).
    #[arg(long)]
    pub(crate) mutating: Vec<String>,
    /// ValidatingWebhookConfiguration to delete (repeatable).
    #[arg(long)]
    pub(crate) validating: Vec<String>,
    /// Also delete every native admission policy and binding of this set (what
    /// `serve --native-policies=<set>` keeps in the cluster).
    #[arg(long)]
    pub(crate) native_policies: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct OfflineArgs {
    /// Manifest file (YAML or JSON, multi-document, objects or AdmissionReviews), directory
    /// (read recursively: *.yaml, *.yml, *.json) or `-` for stdin. Repeatable. TrainJob
    /// runtimes (ClusterTrainingRuntime, TrainingRuntime) and DRA claims (ResourceClaimTemplate,
    /// ResourceClaim) among them are taken as the cluster's: they size the TrainJobs and count
    /// the GPUs of the pods that name them.
    #[arg(short = 'f', long = "filename", required = true)]
    pub(crate) files: Vec<PathBuf>,
    /// Config file (default: the built-in example policy).
    #[arg(long, env = "LAUNCHGATE_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Treat bare objects as belonging to this queue (as if labelled launchgate.io/queue=Q).
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Namespace for bare objects without one.
    #[arg(long, short = 'n')]
    pub(crate) namespace: Option<String>,
}

/// Output format of `mutate` and `validate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Args, Debug)]
pub(crate) struct ValidateArgs {
    #[command(flatten)]
    pub(crate) offline: OfflineArgs,
    /// Print the verdicts as YAML or JSON (default: one readable line per object).
    #[arg(short = 'o', long = "output", value_enum)]
    pub(crate) output: Option<OutputFormat>,
}

#[derive(Args, Debug)]
pub(crate) struct MutateArgs {
    #[command(flatten)]
    pub(crate) offline: OfflineArgs,
    /// Output format (default: YAML for objects, JSON for --patch and --review).
    #[arg(short = 'o', long = "output", value_enum)]
    pub(crate) output: Option<OutputFormat>,
    /// Print the JSON Patch instead of the mutated object.
    #[arg(long)]
    pub(crate) patch: bool,
    /// Print the AdmissionReview response the webhook would send.
    #[arg(long, conflicts_with = "patch")]
    pub(crate) review: bool,
}

#[derive(Args, Debug)]
pub(crate) struct CertsArgs {
    /// DNS names (or IPs) of the Service, e.g. launchgate.launchgate.svc (repeatable).
    #[arg(long = "dns", required = true)]
    pub(crate) dns: Vec<String>,
    /// Output directory for ca.crt, tls.crt and tls.key.
    #[arg(long, default_value = "certs")]
    pub(crate) out: PathBuf,
    /// Validity of the serving certificate in days.
    #[arg(long, default_value_t = 365)]
    pub(crate) days: i64,
}

/// Every input document as an admission request, and the TrainJob runtimes given beside them.
fn requests(args: &OfflineArgs) -> Result<inputs::Inputs> {
    inputs::load(
        &args.files,
        args.queue.as_deref(),
        args.namespace.as_deref(),
    )
}

/// The policy of the config file `config` (the embedded default without one) with the
/// LaunchQueues given among `inputs`, each overriding the config's queue of its name: what the
/// server serves with those LaunchQueues in the cluster.
fn policy_with(config: Option<&std::path::Path>, inputs: &inputs::Inputs) -> Result<Policy> {
    use crate::policy::launchqueue;
    let policy = load_policy(config)?;
    if inputs.launch_queues.is_empty() {
        return Ok(policy);
    }
    let mut queues = Vec::new();
    for (source, object) in &inputs.launch_queues {
        let queue = launchqueue::parse(object)
            .and_then(|q| launchqueue::check(&policy.config, &q).map(|()| q))
            .map_err(|e| {
                anyhow::anyhow!("{source}: the LaunchQueue does not hold as a queue:\n{e}")
            })?;
        queues.push(queue);
    }
    Policy::from_config(launchqueue::merged(policy.config.clone(), &queues))
        .map_err(|e| anyhow::anyhow!("the LaunchQueues given do not hold with the config:\n{e}"))
}

fn print_values(values: &[Value], format: OutputFormat) -> Result<()> {
    for (i, v) in values.iter().enumerate() {
        match format {
            OutputFormat::Json => outln!("{}", serde_json::to_string_pretty(v)?)?,
            OutputFormat::Yaml => {
                if i > 0 {
                    outln!("---")?;
                }
                out!("{}", serde_yaml::to_string(v)?)?;
            }
        }
    }
    Ok(())
}

fn mutate_cmd(args: &MutateArgs) -> Result<ExitCode> {
    let mut denied = false;
    let mut outputs = Vec::new();
    let inputs = requests(&args.offline)?;
    let policy = policy_with(args.offline.config.as_deref(), &inputs)?;
    for input in &inputs.workloads {
        let req = &input.request;
        let d = decide(&policy, Endpoint::Mutate, req, &inputs.runtimes);
        for w in &d.response.warnings {
            eprintln!("Warning: {}: {w}", describe(req));
        }
        if !d.response.allowed {
            denied = true;
            let msg = d
                .response
                .status
                .as_ref()
                .map(|s| s.message.clone())
                .unwrap_or_default();
            eprintln!("DENIED {}: {msg}", describe(req));
        }
        if args.review {
            outputs.push(serde_json::to_value(AdmissionReviewResponse::new(
                d.response,
            ))?);
        } else if args.patch {
            outputs.push(serde_json::to_value(&d.patch)?);
        } else {
            let mut obj = req.object.clone().unwrap_or(Value::Null);
            json_patch::patch(&mut obj, &d.patch).context("applying our own patch")?;
            outputs.push(obj);
        }
    }
    let objects = !(args.patch || args.review);
    match args.output {
        // Several mutated objects as JSON: one `kind: List`, as kubectl prints them.
        Some(OutputFormat::Json) if objects && outputs.len() > 1 => print_values(
            &[json!({"apiVersion": "v1", "kind": "List", "items": outputs})],
            OutputFormat::Json,
        )?,
        Some(format) => print_values(&outputs, format)?,
        None if objects => print_values(&outputs, OutputFormat::Yaml)?,
        None => print_values(&outputs, OutputFormat::Json)?,
    }
    Ok(ExitCode::from(u8::from(denied)))
}

fn validate_cmd(args: &ValidateArgs) -> Result<ExitCode> {
    let mut denied = false;
    let mut verdicts = Vec::new();
    let inputs = requests(&args.offline)?;
    let policy = policy_with(args.offline.config.as_deref(), &inputs)?;
    for input in &inputs.workloads {
        let req = &input.request;
        let j = crate::judge::judge(&policy, req, &inputs.runtimes);
        denied |= !j.allowed();
        if args.output.is_some() {
            verdicts.push(json!({
                "source": input.source,
                "kind": req.kind.kind,
                "name": req.name,
                "namespace": req.namespace,
                "queue": j.queue(),
                "allowed": j.allowed(),
                "skipped": j.skipped(),
                "deniedBy": j.denied_by().map(|s| s.as_str()),
                "message": j.message(),
                "rules": j.denied_rules(),
                "violations": j.violations().collect::<Vec<_>>(),
                "warnings": j.warnings(),
                "auditViolations": j.audit_violations(),
            }));
            continue;
        }
        if let Some(why) = j.skip_reason() {
            outln!("SKIPPED {} ({why})", describe(req))?;
        } else if j.allowed() {
            outln!("ALLOWED {}", describe(req))?;
        } else {
            outln!("DENIED {}:", describe(req))?;
            for line in j.message().lines() {
                outln!("  {line}")?;
            }
        }
        for w in j.warnings() {
            outln!("  warning ({}): {}", w.rule, w.message)?;
        }
        for v in j.audit_violations() {
            outln!("  audit: {v}")?;
        }
    }
    if let Some(format) = args.output {
        print_values(&[Value::Array(verdicts)], format)?;
    }
    Ok(ExitCode::from(u8::from(denied)))
}

fn init_logging(format: LogFormat, level: &str) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: container logs and files get plain text (and NO_COLOR is
    // honoured).
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

fn serve_cmd(opts: ServeOptions) -> Result<ExitCode> {
    init_logging(opts.log_format, &opts.log_level);
    // Before anything connects or binds: a refused flag fails the start, not a retry loop.
    opts.registration.check()?;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all()
        .on_thread_park(crate::server::budget::on_worker_idle);
    if let Some(n) = opts.worker_threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.build()?;
    rt.block_on(async move {
        let cluster = if opts.cluster_lookups {
            let scope = opts.watch_scope();
            Some(crate::server::cluster_view(Duration::from_secs(10), scope).await?)
        } else {
            None
        };
        crate::server::run_until_signal(opts, cluster).await
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Standard output was closed by its reader (a pipe into `head`): there is nobody left to
/// print for, so the run ends quietly instead of panicking.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

impl StdoutClosed {
    /// A write error to stdout as the CLI reports it: [`StdoutClosed`] for a broken pipe.
    fn check(e: std::io::Error) -> anyhow::Error {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            anyhow::Error::new(StdoutClosed)
        } else {
            anyhow::Error::new(e).context("writing to standard output")
        }
    }
}

/// True when a run ended because its reader closed standard output (see [`StdoutClosed`]).
pub fn stdout_closed(e: &anyhow::Error) -> bool {
    e.is::<StdoutClosed>()
}

/// An error as one line for the user: its context, then each cause not already said (a client
/// library's error often repeats its own sources in its message, so the plain `{:#}` chain
/// would say the same failure three times).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if part.is_empty() || text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    // A URL in an error (an endpoint, the API server's echo of a webhook URL) may carry
    // credentials.
    crate::server::redact::in_text(&text).into_owned()
}

fn compile_native(args: &NativeArgs) -> Result<ExitCode> {
    if let (Some(slots), Some(set)) = (args.dormant_slots, &args.policy_set) {
        let objects = crate::native::dormant_set(set, slots);
        match args.output {
            NativeFormat::Yaml => {
                for object in &objects {
                    out!("---\n{}", serde_yaml::to_string(object)?)?;
                }
            }
            NativeFormat::Json => outln!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": objects,
                }))?
            )?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (policy, hash) = match &args.config {
        None => (
            Policy::embedded_default(),
            crate::policy::config_hash(DEFAULT_CONFIG_YAML.as_bytes()),
        ),
        Some(path) => {
            let text = inputs::read_input(path)?;
            let policy = Policy::from_yaml(&text)
                .map_err(|e| anyhow::anyhow!("config {}:\n{e}", path.display()))?;
            (policy, crate::policy::config_hash(text.as_bytes()))
        }
    };
    if args.equivalent_config {
        let config = crate::native::native_subset(&policy);
        match args.output {
            NativeFormat::Yaml => out!("{}", serde_yaml::to_string(&config)?)?,
            NativeFormat::Json => outln!("{}", serde_json::to_string_pretty(&config)?)?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let options = crate::native::Options {
        config_hash: Some(hash),
        ..Default::default()
    };
    let compiled = crate::native::compile(&policy, &options);
    match (args.report, args.output) {
        (true, NativeFormat::Yaml) => out!("{}", compiled.report.to_markdown())?,
        (true, NativeFormat::Json) => {
            outln!("{}", serde_json::to_string_pretty(&compiled.report)?)?
        }
        (false, NativeFormat::Yaml) => {
            for object in &compiled.objects {
                out!("---\n{}", serde_yaml::to_string(object)?)?;
            }
        }
        (false, NativeFormat::Json) => outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": compiled.objects,
            }))?
        )?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs a parsed command line; `Ok` carries the exit code.
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Serve(opts) => serve_cmd(*opts),
        Command::Mutate(args) => mutate_cmd(&args),
        Command::Validate(args) => validate_cmd(&args),
        Command::Test(args) => test_suite::run(&args),
        Command::Audit(args) => audit::run(&args),
        Command::ExportLaunchqueues { config } => {
            let policy = match &config {
                Some(path) => {
                    let text = inputs::read_input(path)?;
                    Policy::from_yaml(&text)
                        .map_err(|e| anyhow::anyhow!("{}:\n{e}", path.display()))?
                }
                None => load_policy(None)?,
            };
            // The queues as written: the config's queues before defaults are filled in.
            let text = match &config {
                Some(path) => inputs::read_input(path)?,
                None => DEFAULT_CONFIG_YAML.to_string(),
            };
            let written: Value = serde_yaml::from_str(&text)?;
            let manifests: Vec<Value> = crate::policy::launchqueue::manifests(&policy.config)
                .into_iter()
                .map(|mut m| {
                    let name = m["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    if let Some(spec) = written.pointer(&format!(
                        "/queues/{}",
                        name.replace('~', "~0").replace('/', "~1")
                    )) {
                        m["spec"] = if spec.is_null() {
                            json!({})
                        } else {
                            spec.clone()
                        };
                    }
                    m
                })
                .collect();
            print_values(&manifests, OutputFormat::Yaml)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig {
            file,
            native_policy_slots,
        } => {
            let text = inputs::read_input(&file)?;
            let shown = if file.as_os_str() == "-" {
                "<stdin>".to_string()
            } else {
                file.display().to_string()
            };
            match Policy::from_yaml(&text) {
                Ok(p) => {
                    let queues = p.queues.len();
                    if let Some(slots) = native_policy_slots {
                        if let Err(why) = crate::native::check_capacity(queues, slots) {
                            eprintln!("{shown}: invalid config for native admission policies");
                            eprintln!("  {why}");
                            return Ok(ExitCode::from(2));
                        }
                    } else if let Err(why) =
                        crate::native::check_capacity(queues, crate::native::DEFAULT_POLICY_SLOTS)
                    {
                        eprintln!(
                            "{shown}: warning: with native admission policies (policyMode native or hybrid) {why}; pass --native-policy-slots to check it as `serve` will"
                        );
                    }
                    outln!("{shown}: ok ({} queue(s))", p.queues.len())?;
                    if let Some(slots) = native_policy_slots {
                        outln!("native admission policies: {queues} of {slots} slots")?;
                    }
                    outln!(
                        "controllers trusted with what they make (judged on the per-pod rules only):"
                    )?;
                    for trusted in &p.trusted_creators {
                        outln!("  {}: {trusted}", trusted.kind.as_str())?;
                    }
                    for warning in &p.warnings {
                        eprintln!("{shown}: warning: {warning}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("{shown}: invalid config");
                    for err in &e.0 {
                        eprintln!("  {err}");
                    }
                    Ok(ExitCode::from(2))
                }
            }
        }
        Command::ImportQueue(args) => import_queue::run(&args),
        Command::Playground(args) => playground::run(&args),
        Command::CompileNative(args) => compile_native(&args),
        Command::Completion { shell } => {
            use clap::CommandFactory;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "launchgate", &mut script);
            out!("{}", String::from_utf8_lossy(&script))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::PrintDefaultConfig => {
            out!("{DEFAULT_CONFIG_YAML}")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::DeleteWebhooks(args) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let client = kube::Client::try_default()
                    .await
                    .context("connecting to the Kubernetes API")?;
                let report = crate::server::delete_webhooks(
                    client.clone(),
                    &args.mutating,
                    &args.validating,
                )
                .await?;
                for line in report {
                    outln!("{line}")?;
                }
                if let Some(set) = &args.native_policies {
                    outln!(
                        "{}",
                        crate::server::delete_native_policies(client, set).await?
                    )?;
                }
                Ok::<_, anyhow::Error>(())
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Certs(args) => {
            let generated = crate::certs::generate(&args.dns, args.days)?;
            let w = crate::certs::write_to_dir(&generated, &args.out)?;
            outln!(
                "wrote {}, {}, {}",
                w.ca.display(),
                w.cert.display(),
                w.key.display()
            )?;
            outln!("caBundle (base64 of ca.crt) for the webhook configurations:")?;
            use base64::Engine as _;
            outln!(
                "{}",
                base64::engine::general_purpose::STANDARD.encode(generated.ca_pem)
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod error_tests {
    #[test]
    fn an_error_says_each_cause_once() {
        let inner = anyhow::anyhow!("no such file");
        let middle = inner.context("failed to read kubeconfig: no such file");
        let outer = middle.context("connecting to the cluster");
        assert_eq!(
            super::error_text(&outer),
            "connecting to the cluster: failed to read kubeconfig: no such file"
        );
    }
}
