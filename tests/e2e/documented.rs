//! The pages' commands that need a cluster, run as the pages write them: the blocks marked
//! `<!-- docs-test: covered by e2e::documented::the_pages_cluster_commands_run_as_shown -->`
//! are read from docs/queue-limits.md, docs/native-overview.md, docs/native-policies.md and
//! docs/audit.md (the docs test, tests/docs_commands.rs, requires every command block to run
//! there or here) and run with `sh`, with this build's `launchgate` and kubectl on `PATH`, as
//! the suite's admin, in a scratch directory holding the repository's files and the files a
//! reader of the page has made (`launchgate-config.yaml`, the page's `mnist-job.yaml`,
//! `new-limits.yaml`). A console block's output is compared with the page's as the docs test
//! compares it, after the few substitutions listed per page (names this cluster gives
//! differently); a shell block must exit 0.
//!
//! It runs alone: it applies the compiled native policies and the dormant slots of the pages
//! cluster-wide, as the pages do, and audits every namespace; it deletes what it applied.

use crate::common::docs::{Block, diff, marked_blocks, output_matches, steps};
use crate::ctx::Ctx;
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::path::PathBuf;

/// The marker of the blocks this test runs.
const MARKER: &str = "covered by e2e::documented::the_pages_cluster_commands_run_as_shown";

/// A reader's working directory: links to the repository's top-level entries, the files the
/// reader has written, and a kubeconfig whose current namespace is the test's.
struct Reader {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Reader {
    fn new(ctx: &Ctx) -> Result<Reader> {
        let dir = std::env::temp_dir().join(format!("launchgate-e2e-documented-{}", ctx.ns));
        crate::common::docs::reader_dir(&dir)?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::copy(&ctx.env.kubeconfig, &kubeconfig)?;
        let reader = Reader { dir, kubeconfig };
        reader.sh(&format!(
            "kubectl config set-context --current --namespace={}",
            ctx.ns
        ))?;
        Ok(reader)
    }

    fn write(&self, name: &str, content: &str) -> Result<()> {
        Ok(std::fs::write(self.dir.join(name), content)?)
    }

    /// Runs `script` with `sh -c` (output: standard output and error together) and returns
    /// what it printed and its exit code.
    fn run(&self, script: &str) -> Result<(Vec<String>, i32)> {
        let path = crate::common::docs::path_with_launchgate();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{{ {script}\n}} 2>&1"))
            .current_dir(&self.dir)
            .env("PATH", path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .output()
            .context("sh (and kubectl on PATH)")?;
        let text = String::from_utf8_lossy(&out.stdout);
        Ok((
            text.lines().map(|l| l.trim_end().to_owned()).collect(),
            out.status.code().unwrap_or(-1),
        ))
    }

    /// Runs `script`, which must exit 0; returns its output.
    fn sh(&self, script: &str) -> Result<String> {
        let (out, code) = self.run(script)?;
        ensure!(code == 0, "`{script}` exits {code}:\n{}", out.join("\n"));
        Ok(out.join("\n"))
    }

    /// Runs the page's blocks this test covers, each command and shown output with `subst`
    /// applied; returns the output of every command (a shell block: of the block).
    fn run_page(&self, page: &str, subst: &[(&str, &str)]) -> Result<Vec<String>> {
        let apply = |text: &str| {
            subst
                .iter()
                .fold(text.to_owned(), |t, (from, to)| t.replace(from, to))
        };
        let mut printed = Vec::new();
        for block in marked_blocks(page, MARKER) {
            let Block {
                line, lang, body, ..
            } = &block;
            if lang != "console" {
                let script = format!("set -e\n{}", apply(&body.join("\n")));
                let (out, code) = self.run(&script)?;
                ensure!(
                    code == 0,
                    "{page}:{line}: the block exits {code}:\n{}",
                    out.join("\n")
                );
                printed.push(out.join("\n"));
                continue;
            }
            for step in steps(body) {
                let command = apply(&step.command);
                let (shown, shown_code) = step.shown();
                let shown: Vec<String> = shown.iter().map(|l| apply(l)).collect();
                let (out, code) = self.run(&command)?;
                if !output_matches(&shown, &out) {
                    bail!(
                        "{page}:{line}: $ {command}\nthe page shows (-) what the command does not print (+):\n{}",
                        diff(&shown, &out)
                    );
                }
                ensure!(
                    code == shown_code,
                    "{page}:{line}: $ {command}\nexits {code}, the page shows {shown_code}"
                );
                printed.push(out.join("\n"));
            }
        }
        Ok(printed)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The recorded launch Job of docs/queue-limits.md (8 GPUs), as its reader saved it to
/// `mnist-job.yaml`: the request's object, without what the API server assigns.
fn mnist_job() -> Result<String> {
    let review = crate::common::fixture_json("create-job-launch-acme-mnist.json");
    let mut job = review["request"]["object"].clone();
    let meta = job["metadata"]
        .as_object_mut()
        .context("the recorded Job has no metadata")?;
    for assigned in [
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
    ] {
        meta.remove(assigned);
    }
    if meta.get("name").is_none_or(Value::is_null) {
        meta.insert("name".into(), json!("launch-acme-mnist"));
    }
    meta.remove("generateName");
    Ok(serde_yaml::to_string(&job)?)
}

/// Deletes the cluster-wide objects a page's commands applied: the admission policies and
/// bindings in the reader's `file` (`launchgate compile-native` output).
fn delete_applied(reader: &Reader, file: &str) {
    let _ = reader.sh(&format!("kubectl delete --ignore-not-found -f {file}"));
}

pub async fn the_pages_cluster_commands_run_as_shown(ctx: &Ctx) -> Result<()> {
    let reader = Reader::new(ctx)?;
    reader.write(
        "launchgate-config.yaml",
        launchgate::policy::DEFAULT_CONFIG_YAML,
    )?;

    // docs/queue-limits.md: the recorded Job through the webhook, refused with the line
    // `launchgate validate` prints. The suite registers the chart's plain-manifest webhooks
    // (one validating webhook, `validate.launchgate.io`); the page shows a default install's.
    reader.write("mnist-job.yaml", &mnist_job()?)?;
    reader.run_page(
        "docs/queue-limits.md",
        &[("validate-deny.launchgate.io", "validate.launchgate.io")],
    )?;

    // docs/native-overview.md and docs/native-policies.md: the compiled policies of the
    // reader's config, checked by a server-side dry run and applied; the dormant slots created.
    let result = async {
        reader.run_page("docs/native-overview.md", &[])?;
        reader.run_page("docs/native-policies.md", &[])?;
        let applied = reader.sh("kubectl get validatingadmissionpolicies -o name")?;
        ensure!(
            applied.contains("launchgate"),
            "the page's `kubectl apply -f native.yaml` left no launchgate policy: {applied}"
        );
        Ok(())
    }
    .await;
    delete_applied(&reader, "native.yaml");
    let _ = reader
        .sh("launchgate compile-native --dormant-slots=16 --policy-set=launchgate > slots.yaml");
    delete_applied(&reader, "slots.yaml");
    result?;

    // docs/audit.md: a stricter config audited against what runs; the test's own Job asking 3
    // GPUs fails it (every namespace is audited, as the page's command does).
    reader.write("new-limits.yaml", &crate::audit::stricter_config()?)?;
    ctx.create(&crate::audit::gpu_job("llm-3gpu", 3), false)
        .await?;
    let printed = reader.run_page("docs/audit.md", &[])?.join("\n");
    let ns = &ctx.ns;
    ensure!(
        printed.lines().any(|l| l.starts_with(ns.as_str())
            && l.contains("llm-3gpu")
            && l.contains("FAIL")
            && l.contains("exceeds maximum 2")),
        "the audit did not fail the 3-GPU Job:\n{printed}"
    );
    ensure!(
        printed.contains(&format!("wrote PolicyReport {ns}/launchgate")),
        "the audit wrote no PolicyReport for the namespace:\n{printed}"
    );
    Ok(())
}
