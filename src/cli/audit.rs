//! `launchgate audit`: the CLI shell over [`crate::audit::run`].

use crate::audit::{AuditOptions, AuditResult, render_table};
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum AuditFormat {
    Table,
    Json,
}

/// `--report-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReportFormatArg {
    Policyreport,
    Openreports,
}

#[derive(Args, Debug)]
pub(crate) struct AuditArgs {
    /// Config to judge against, e.g. the one you are about to roll out ("what would this change
    /// break?"). Default: the built-in example policy.
    #[arg(long, env = "LAUNCHGATE_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Only this namespace (default: all namespaces).
    #[arg(long, short = 'n')]
    pub(crate) namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub(crate) output: AuditFormat,
    /// Objects per list request; the rest is fetched page by page.
    #[arg(long, default_value_t = 500)]
    pub(crate) page_size: u32,
    /// Also write one report per namespace (named `launchgate`), when its CRD is installed.
    #[arg(long)]
    pub(crate) policy_reports: bool,
    /// The report API: `policyreport` (wgpolicyk8s.io/v1alpha2 PolicyReport) or `openreports`
    /// (openreports.io/v1alpha1 Report).
    #[arg(
        long,
        value_enum,
        default_value = "policyreport",
        env = "LAUNCHGATE_REPORT_FORMAT"
    )]
    pub(crate) report_format: ReportFormatArg,
    /// Judge as the config's native admission policies would (`compile-native`): what its
    /// report lists as webhook-only is left out — what a cluster in `policyMode: native` admits.
    #[arg(long)]
    pub(crate) native: bool,
    /// Exit 0 even when workloads would be denied (for a scheduled audit).
    #[arg(long)]
    pub(crate) no_fail: bool,
}

/// Connects with the kubeconfig (KUBECONFIG, ~/.kube/config, or in-cluster) and audits.
pub(crate) fn run(args: &AuditArgs) -> Result<ExitCode> {
    let mut policy = crate::server::load_policy(args.config.as_deref())?;
    if args.native {
        policy = crate::native::as_native(&policy)
            .map_err(|e| anyhow::anyhow!("native policies: {e}"))?;
    }
    let opts = AuditOptions {
        namespace: args.namespace.clone(),
        page_size: args.page_size.max(1),
        write_policy_reports: args.policy_reports,
        report_format: match args.report_format {
            ReportFormatArg::Policyreport => crate::audit::ReportFormat::PolicyReport,
            ReportFormatArg::Openreports => crate::audit::ReportFormat::OpenReports,
        },
        progress: std::io::stderr().is_terminal(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(async {
        let client = kube::Client::try_default()
            .await
            .context("connecting to the cluster (KUBECONFIG, ~/.kube/config or in-cluster)")?;
        crate::audit::run(client, &policy, &opts).await
    })?;
    match args.output {
        AuditFormat::Table => out!("{}", render_table(&report))?,
        AuditFormat::Json => {
            let mut v = serde_json::to_value(&report)?;
            v["counts"] = serde_json::to_value(report.counts())?;
            outln!("{}", serde_json::to_string_pretty(&v)?)?;
        }
    }
    let failed = report.entries.iter().any(|e| e.result == AuditResult::Fail);
    Ok(ExitCode::from(u8::from(failed && !args.no_fail)))
}
