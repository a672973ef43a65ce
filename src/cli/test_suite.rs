//! `launchgate test DIR…`: policy test suites.
//!
//! A suite is a YAML file named `launchgate-test.yaml` (or `.yml`), found recursively in the
//! directories given (a suite file may also be named directly). It names a config and, per
//! test, resources (files or globs relative to the suite file) and what the cluster should do
//! with every document in them:
//!
//! ```yaml
//! name: built-in policy
//! config: ../../my-config.yaml      # relative to this file; omitted: the built-in policy
//! runtimes: [runtimes/*.yaml]       # optional: the cluster's TrainJob runtimes, files, globs
//!                                   # or manifests, for every test of the suite
//! tests:
//!   - name: eight GPUs are too many
//!     resources: [resources/eight-gpus.yaml, "more/*.yaml"]
//!     queue: gpu-queue              # optional: as if labelled launchgate.io/queue
//!     namespace: wandb              # optional: namespace of bare objects
//!     expect:
//!       result: denied              # allowed | denied | skipped (not a launch workload)
//!       message: exceeds maximum 4  # substring(s) of the denial message; [] = no denial
//!       rules: [limits.variables]   # rule id(s), each of some violation (denying, or under
//!                                   # warn/audit enforcement allowed); [] = no violation
//!       warnings: [not configured]  # substring(s), each of some warning; [] = no warnings
//!       warningRules: [queue.unknown]  # id(s) of rules or notices, each of some warning
//!       mutated: {spec: {backoffLimit: 0}}   # the object after launchgate's mutation
//!       mutatedMatch: subset        # subset (default; `[]` = an empty or absent list) | full
//!       patch: [{op: add, path: /spec/backoffLimit, value: 0}]   # the exact JSON Patch
//! ```
//!
//! Each document is judged as the cluster would ([`crate::judge::judge`]: mutate, then
//! validate the mutated object). The comparison is pure ([`check`]); the rest reads files and
//! prints a table, JSON or JUnit XML.

use super::inputs::{Inputs, add_runtime, describe, named_documents, read_input};
use crate::judge::{Judgement, judge};
use crate::policy::Policy;
use crate::server::load_policy;
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use wildmatch::WildMatch;

/// File names recognised as suites when walking a directory.
pub(crate) const SUITE_FILE_NAMES: [&str; 2] = ["launchgate-test.yaml", "launchgate-test.yml"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum TestFormat {
    Table,
    Json,
    Junit,
}

#[derive(Args, Debug)]
pub(crate) struct TestArgs {
    /// Directories searched recursively for launchgate-test.yaml suites, or suite files.
    #[arg(required = true)]
    pub(crate) paths: Vec<PathBuf>,
    /// Output format: a table with a diff per failure, JSON, or JUnit XML for CI.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub(crate) output: TestFormat,
    /// Judge as the config's native admission policies would (`compile-native`): what its
    /// report lists as webhook-only (PyTorch wiring, the cache, warnings, …) is left out.
    #[arg(long)]
    pub(crate) native: bool,
}

/// A suite file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SuiteFile {
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// Config file relative to the suite file; omitted or `builtin`: the built-in policy.
    #[serde(default)]
    pub(crate) config: Option<String>,
    /// The cluster's TrainJob runtimes (ClusterTrainingRuntimes, TrainingRuntimes) for every
    /// test: files or globs relative to the suite file, or manifests written inline.
    #[serde(default)]
    pub(crate) runtimes: Vec<RuntimeEntry>,
    pub(crate) tests: Vec<TestCase>,
}

/// One entry of a suite's `runtimes:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum RuntimeEntry {
    /// A file or glob relative to the suite file.
    File(String),
    /// A runtime manifest written in the suite.
    Manifest(serde_json::Map<String, Value>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TestCase {
    pub(crate) name: String,
    /// Files or globs (`*`, `?`, `**`) relative to the suite file.
    pub(crate) resources: Vec<String>,
    #[serde(default)]
    pub(crate) queue: Option<String>,
    #[serde(default)]
    pub(crate) namespace: Option<String>,
    pub(crate) expect: Expectation,
}

/// One string or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn items(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(s) => vec![s.as_str()],
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ExpectedResult {
    Allowed,
    Denied,
    Skipped,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MatchMode {
    #[default]
    Subset,
    Full,
}

/// What a test expects of each of its documents.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Expectation {
    pub(crate) result: ExpectedResult,
    /// Substring(s) the denial message must contain; an empty list: no denial message.
    #[serde(default)]
    pub(crate) message: Option<OneOrMany>,
    /// Rule id(s) ([`crate::rules`]), each of some violation found, whatever its enforcement;
    /// an empty list: no violation at all.
    #[serde(default)]
    pub(crate) rules: Option<OneOrMany>,
    /// Substring(s), each contained in some warning; an empty list: no warnings at all.
    #[serde(default)]
    pub(crate) warnings: Option<OneOrMany>,
    /// Id(s) of rules or notices, each of some warning; an empty list: no warnings at all.
    #[serde(default)]
    pub(crate) warning_rules: Option<OneOrMany>,
    /// The object after launchgate's mutation.
    #[serde(default)]
    pub(crate) mutated: Option<Value>,
    #[serde(default)]
    pub(crate) mutated_match: MatchMode,
    /// The exact JSON Patch of the mutation.
    #[serde(default)]
    pub(crate) patch: Option<Value>,
}

/// One expectation that does not hold: what was expected, what came out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Mismatch {
    /// `result`, `message`, `warnings`, `patch`, or `mutated <path>`.
    pub(crate) field: String,
    pub(crate) expected: String,
    pub(crate) got: String,
}

fn got_result(j: &Judgement) -> String {
    if !j.allowed() {
        format!(
            "denied (by the {} webhook)",
            j.denied_by().map_or("", |s| s.as_str())
        )
    } else if j.skipped() {
        "skipped (not a launch workload: left untouched)".into()
    } else {
        "allowed".into()
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::Object(_) | Value::Array(_) => serde_json::to_string(v).unwrap_or_default(),
        _ => v.to_string(),
    }
}

fn path_child(path: &str, key: &str) -> String {
    let simple = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if simple {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    } else {
        format!("{path}[{key:?}]")
    }
}

/// Differences between `expected` and `got`: under `Subset`, only what `expected` names must be
/// there (objects by key, arrays element by element); under `Full`, everything must be equal.
pub(crate) fn diff_values(
    expected: &Value,
    got: Option<&Value>,
    mode: MatchMode,
    path: &str,
    out: &mut Vec<Mismatch>,
) {
    let shown = |p: &str| {
        if p.is_empty() {
            "mutated (the whole object)".to_string()
        } else {
            format!("mutated {p}")
        }
    };
    match (expected, got) {
        (Value::Object(e), Some(Value::Object(g))) => {
            for (k, ev) in e {
                diff_values(ev, g.get(k), mode, &path_child(path, k), out);
            }
            if mode == MatchMode::Full {
                for (k, gv) in g {
                    if !e.contains_key(k) {
                        out.push(Mismatch {
                            field: shown(&path_child(path, k)),
                            expected: "(absent)".into(),
                            got: show(gv),
                        });
                    }
                }
            }
        }
        // `[]` names no element to look for, so as a subset it would match any list: it means
        // "empty" (an absent list is empty too, as Kubernetes reads it).
        (Value::Array(e), None | Some(Value::Null))
            if e.is_empty() && mode == MatchMode::Subset => {}
        (Value::Array(e), Some(Value::Array(g))) if e.is_empty() && !g.is_empty() => {
            out.push(Mismatch {
                field: shown(path),
                expected: "[] (an empty list)".into(),
                got: show(&Value::Array(g.clone())),
            })
        }
        (Value::Array(e), Some(Value::Array(g)))
            if mode == MatchMode::Subset || e.len() == g.len() =>
        {
            for (i, ev) in e.iter().enumerate() {
                diff_values(ev, g.get(i), mode, &format!("{path}[{i}]"), out);
            }
        }
        (e, Some(g)) if e == g => {}
        (e, g) => out.push(Mismatch {
            field: shown(path),
            expected: show(e),
            got: g.map_or_else(|| "(absent)".into(), show),
        }),
    }
}

/// Each of `wanted` among the ids `found`; none wanted (`[]`): none found.
fn expect_ids(field: &str, what: &str, wanted: Vec<&str>, found: &[&str], out: &mut Vec<Mismatch>) {
    let got = || {
        if found.is_empty() {
            "none".to_string()
        } else {
            found.join(", ")
        }
    };
    if wanted.is_empty() && !found.is_empty() {
        out.push(Mismatch {
            field: field.into(),
            expected: "none".into(),
            got: got(),
        });
    }
    for want in wanted {
        if !found.contains(&want) {
            out.push(Mismatch {
                field: field.into(),
                expected: format!("{what} {want:?}"),
                got: got(),
            });
        }
    }
}

/// Checks one judged document against an expectation. Empty: every expectation holds.
pub(crate) fn check(expect: &Expectation, j: &Judgement) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let result_ok = match expect.result {
        ExpectedResult::Denied => !j.allowed(),
        ExpectedResult::Allowed => j.allowed() && !j.skipped(),
        ExpectedResult::Skipped => j.allowed() && j.skipped(),
    };
    if !result_ok {
        let mut got = got_result(j);
        let message = j.message();
        if !message.is_empty() {
            got.push_str(&format!(": {message}"));
        }
        out.push(Mismatch {
            field: "result".into(),
            expected: format!("{:?}", expect.result).to_lowercase(),
            got,
        });
    }
    if let Some(m) = &expect.message {
        let message = j.message();
        if m.items().is_empty() && !message.is_empty() {
            // `message: []`, like `warnings: []`: none at all.
            out.push(Mismatch {
                field: "message".into(),
                expected: "no denial message".into(),
                got: message.clone(),
            });
        }
        for want in m.items() {
            if !message.contains(want) {
                out.push(Mismatch {
                    field: "message".into(),
                    expected: format!("a denial message containing {want:?}"),
                    got: if message.is_empty() {
                        format!("no denial message ({})", got_result(j))
                    } else {
                        message.clone()
                    },
                });
            }
        }
    }
    if let Some(r) = &expect.rules {
        let found = crate::rules::ids(j.violations());
        expect_ids("rules", "a violation of", r.items(), &found, &mut out);
    }
    if let Some(r) = &expect.warning_rules {
        let found = crate::rules::warning_ids(&j.warnings());
        expect_ids("warningRules", "a warning of", r.items(), &found, &mut out);
    }
    if let Some(w) = &expect.warnings {
        let warnings: Vec<String> = j.warnings().into_iter().map(|w| w.message).collect();
        let wanted = w.items();
        let got = || {
            if warnings.is_empty() {
                "no warnings".to_string()
            } else {
                warnings.join("\n")
            }
        };
        if wanted.is_empty() && !warnings.is_empty() {
            out.push(Mismatch {
                field: "warnings".into(),
                expected: "no warnings".into(),
                got: got(),
            });
        }
        for want in wanted {
            if !warnings.iter().any(|x| x.contains(want)) {
                out.push(Mismatch {
                    field: "warnings".into(),
                    expected: format!("a warning containing {want:?}"),
                    got: got(),
                });
            }
        }
    }
    if let Some(expected) = &expect.mutated {
        diff_values(
            expected,
            j.mutated.as_ref(),
            expect.mutated_match,
            "",
            &mut out,
        );
    }
    if let Some(expected) = &expect.patch {
        let got = serde_json::to_value(&j.mutation.patch).unwrap_or(Value::Null);
        if &got != expected {
            let lines = |v: &Value| match v {
                Value::Array(ops) if !ops.is_empty() => {
                    ops.iter().map(show).collect::<Vec<_>>().join("\n")
                }
                Value::Array(_) => "[] (no change)".into(),
                other => show(other),
            };
            out.push(Mismatch {
                field: "patch".into(),
                expected: lines(expected),
                got: lines(&got),
            });
        }
    }
    out
}

/// The outcome of one document of one test.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CaseResult {
    pub(crate) test: String,
    /// The resource file (relative to the suite) and document, e.g. `resources/a.yaml#2`.
    pub(crate) resource: String,
    /// `Kind name` of the object.
    pub(crate) object: String,
    pub(crate) passed: bool,
    pub(crate) mismatches: Vec<Mismatch>,
}

/// The outcome of one suite file.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SuiteResult {
    pub(crate) file: String,
    pub(crate) name: String,
    pub(crate) cases: Vec<CaseResult>,
}

impl SuiteResult {
    pub(crate) fn failures(&self) -> usize {
        self.cases.iter().filter(|c| !c.passed).count()
    }
}

/// `*` and `?` within one path segment, `**` any number of segments.
pub(crate) fn glob_match(pattern: &str, path: &str) -> bool {
    fn segments(s: &str) -> Vec<&str> {
        s.split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .collect()
    }
    fn rec(p: &[&str], s: &[&str]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(&"**"), _) => rec(&p[1..], s) || (!s.is_empty() && rec(p, &s[1..])),
            (Some(a), Some(b)) => WildMatch::new(a).matches(b) && rec(&p[1..], &s[1..]),
            _ => false,
        }
    }
    rec(&segments(pattern), &segments(path))
}

/// Every file under `dir`, as a `/`-separated path relative to `base`.
fn relative_files(base: &Path, dir: &Path) -> Result<Vec<String>> {
    Ok(super::inputs::files_under(dir, &|_| true)?
        .into_iter()
        .filter_map(|p| {
            p.strip_prefix(base)
                .ok()
                .map(|rel| rel.to_string_lossy().replace('\\', "/"))
        })
        .collect())
}

/// Resolves a resource entry (file or glob) relative to the suite's directory. A pattern that
/// matches nothing is an error (a typo must not make a test pass vacuously).
fn resolve_resources(suite_dir: &Path, pattern: &str) -> Result<Vec<String>> {
    if !pattern.contains(['*', '?']) {
        let p = suite_dir.join(pattern);
        if !p.is_file() {
            bail!("resource {pattern}: no such file ({})", p.display());
        }
        return Ok(vec![pattern.to_string()]);
    }
    // Walk from the literal directory prefix of the pattern.
    let literal: Vec<&str> = pattern
        .split('/')
        .take_while(|s| !s.contains(['*', '?']))
        .collect();
    let start = suite_dir.join(literal.join("/"));
    let mut files = Vec::new();
    if start.is_dir() {
        files.extend(relative_files(suite_dir, &start)?);
    }
    // A suite file is never a resource of a glob (`*.yaml` next to launchgate-test.yaml).
    let is_suite = |f: &str| {
        let name = f.rsplit('/').next().unwrap_or(f);
        SUITE_FILE_NAMES.contains(&name)
    };
    let matched: Vec<String> = files
        .into_iter()
        .filter(|f| glob_match(pattern, f) && !is_suite(f))
        .collect();
    if matched.is_empty() {
        bail!("resource pattern {pattern:?} matches no file");
    }
    Ok(matched)
}

/// Finds the suite files: directories are walked recursively, files are taken as suites.
pub(crate) fn find_suites(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let is_suite = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| SUITE_FILE_NAMES.contains(&n))
    };
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let found = super::inputs::files_under(p, &is_suite)?;
            if found.is_empty() {
                bail!(
                    "{}: no {} found",
                    p.display(),
                    SUITE_FILE_NAMES.join(" or ")
                );
            }
            out.extend(found);
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            bail!("{}: no such file or directory", p.display());
        }
    }
    Ok(out)
}

fn load_suite_policy(suite_dir: &Path, config: Option<&str>) -> Result<Policy> {
    match config {
        None | Some("builtin") => load_policy(None),
        Some(rel) => load_policy(Some(&suite_dir.join(rel))),
    }
}

/// The runtime manifests a suite declares, each with where it came from (`runtimes/a.yaml#2`,
/// `runtimes[0]` for one written inline). Every document must be a runtime: a workload among
/// them would never be judged.
fn suite_runtimes(dir: &Path, entries: &[RuntimeEntry]) -> Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    let mut checked = crate::cluster::GivenObjects::default();
    for (i, entry) in entries.iter().enumerate() {
        let documents = match entry {
            RuntimeEntry::Manifest(object) => {
                vec![(format!("runtimes[{i}]"), Value::Object(object.clone()))]
            }
            RuntimeEntry::File(pattern) => {
                let mut documents = Vec::new();
                for rel in resolve_resources(dir, pattern)? {
                    let text = read_input(&dir.join(&rel))?;
                    for (source, doc) in named_documents(&rel, &text)? {
                        match doc {
                            crate::manifest::InputDocument::Object(object) => {
                                documents.push((source, object))
                            }
                            crate::manifest::InputDocument::Review(_) => {
                                bail!("{source}: an AdmissionReview, not a TrainJob runtime")
                            }
                        }
                    }
                }
                documents
            }
        };
        for (source, object) in documents {
            // Checked here, once for the suite (each test places them in its namespace).
            add_runtime(&mut checked, object.clone(), None)
                .map_err(|e| anyhow!("{source}: invalid runtime: {e}"))?;
            out.push((source, object));
        }
    }
    Ok(out)
}

/// Runs one suite file. Errors are bad input (unreadable suite, config or resource).
pub(crate) fn run_suite(path: &Path, native: bool) -> Result<SuiteResult> {
    let text = read_input(path)?;
    let suite: SuiteFile = serde_yaml::from_str(&text)
        .map_err(|e| anyhow!("{}: not a launchgate test suite: {e}", path.display()))?;
    if suite.tests.is_empty() {
        bail!("{}: no tests", path.display());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut policy = load_suite_policy(dir, suite.config.as_deref())
        .with_context(|| format!("suite {}", path.display()))?;
    if native {
        policy = crate::native::as_native(&policy)
            .map_err(|e| anyhow!("suite {}: native policies: {e}", path.display()))?;
    }
    let runtimes = suite_runtimes(dir, &suite.runtimes)
        .with_context(|| format!("{}: runtimes", path.display()))?;
    let mut cases = Vec::new();
    for test in &suite.tests {
        if test.resources.is_empty() {
            bail!(
                "{}: test {:?} names no resources",
                path.display(),
                test.name
            );
        }
        let context = || format!("{}: test {:?}", path.display(), test.name);
        // The suite's runtimes, placed as this test places bare objects; runtimes among the
        // test's resources join them.
        let mut inputs = Inputs::default();
        for (source, runtime) in &runtimes {
            add_runtime(
                &mut inputs.runtimes,
                runtime.clone(),
                test.namespace.as_deref(),
            )
            .map_err(|e| anyhow!("{source}: invalid runtime: {e}"))
            .with_context(context)?;
        }
        for pattern in &test.resources {
            let files = resolve_resources(dir, pattern).with_context(context)?;
            for rel in files {
                let text = read_input(&dir.join(&rel))?;
                inputs
                    .add_text(
                        &rel,
                        &text,
                        test.queue.as_deref(),
                        test.namespace.as_deref(),
                    )
                    .with_context(context)?;
            }
        }
        if inputs.workloads.is_empty() {
            bail!(
                "{}: test {:?}: its resources hold TrainJob runtimes only, no workload to judge",
                path.display(),
                test.name
            );
        }
        for input in inputs.workloads {
            let j = judge(&policy, &input.request, &inputs.runtimes);
            let mismatches = check(&test.expect, &j);
            cases.push(CaseResult {
                test: test.name.clone(),
                resource: input.source,
                object: describe(&input.request),
                passed: mismatches.is_empty(),
                mismatches,
            });
        }
    }
    Ok(SuiteResult {
        file: path.display().to_string(),
        name: suite.name.unwrap_or_else(|| path.display().to_string()),
        cases,
    })
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                l.to_string()
            } else {
                format!("\n{prefix}{l}")
            }
        })
        .collect()
}

/// The readable diff of one failed case.
pub(crate) fn render_failure(suite: &SuiteResult, case: &CaseResult) -> String {
    let mut s = format!(
        "FAIL {} / {} / {} ({})\n",
        suite.name, case.test, case.resource, case.object
    );
    for m in &case.mismatches {
        let _ = writeln!(s, "  {}:", m.field);
        let _ = writeln!(
            s,
            "    - expected: {}",
            indent(&m.expected, "                ")
        );
        let _ = writeln!(s, "    + got:      {}", indent(&m.got, "                "));
    }
    s
}

/// The default output: one row per case, then the diffs of the failures and the counts.
pub(crate) fn render_table(suites: &[SuiteResult]) -> String {
    let header = ["SUITE", "TEST", "RESOURCE", "RESULT"];
    let rows: Vec<[String; 4]> = suites
        .iter()
        .flat_map(|s| {
            s.cases.iter().map(move |c| {
                [
                    s.name.clone(),
                    c.test.clone(),
                    format!("{} ({})", c.resource, c.object),
                    if c.passed { "PASS" } else { "FAIL" }.to_string(),
                ]
            })
        })
        .collect();
    let mut out = crate::audit::aligned(header, &rows);
    let failures: Vec<String> = suites
        .iter()
        .flat_map(|s| {
            s.cases
                .iter()
                .filter(|c| !c.passed)
                .map(move |c| render_failure(s, c))
        })
        .collect();
    if !failures.is_empty() {
        out.push('\n');
        out.push_str(&failures.join("\n"));
    }
    let total: usize = suites.iter().map(|s| s.cases.len()).sum();
    let failed: usize = suites.iter().map(SuiteResult::failures).sum();
    let _ = writeln!(
        out,
        "\n{} suite(s), {} case(s): {} passed, {} failed",
        suites.len(),
        total,
        total - failed,
        failed
    );
    out
}

/// JSON: every suite and case, with the mismatches of failed cases.
pub(crate) fn render_json(suites: &[SuiteResult]) -> Value {
    let total: usize = suites.iter().map(|s| s.cases.len()).sum();
    let failed: usize = suites.iter().map(SuiteResult::failures).sum();
    json!({"passed": total - failed, "failed": failed, "suites": suites})
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 cannot carry at all (Char ::= #x9 | #xA | #xD |
            // [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]; a Rust string holds no
            // surrogates).
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => {}
            '\u{FFFE}' | '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one `<testsuite>` per suite file, one `<testcase>` per document of a test, a
/// `<failure>` carrying the diff.
pub(crate) fn render_junit(suites: &[SuiteResult]) -> String {
    let total: usize = suites.iter().map(|s| s.cases.len()).sum();
    let failed: usize = suites.iter().map(SuiteResult::failures).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"launchgate\" tests=\"{total}\" failures=\"{failed}\" errors=\"0\">"
    );
    for s in suites {
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" file=\"{}\">",
            xml_escape(&s.name),
            s.cases.len(),
            s.failures(),
            xml_escape(&s.file)
        );
        for c in &s.cases {
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\"",
                xml_escape(&s.name),
                xml_escape(&format!("{} / {} ({})", c.test, c.resource, c.object)),
                xml_escape(&s.file)
            );
            if c.passed {
                out.push_str("/>\n");
            } else {
                let summary = c
                    .mismatches
                    .iter()
                    .map(|m| m.field.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\" type=\"expectation\">{}</failure>\n    </testcase>",
                    xml_escape(&format!("expectation not met: {summary}")),
                    xml_escape(&render_failure(s, c))
                );
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// `launchgate test`.
pub(crate) fn run(args: &TestArgs) -> Result<ExitCode> {
    let mut suites = Vec::new();
    for path in find_suites(&args.paths)? {
        suites.push(run_suite(&path, args.native)?);
    }
    match args.output {
        TestFormat::Table => out!("{}", render_table(&suites))?,
        TestFormat::Json => outln!("{}", serde_json::to_string_pretty(&render_json(&suites))?)?,
        TestFormat::Junit => out!("{}", render_junit(&suites))?,
    }
    let failed = suites.iter().any(|s| s.failures() > 0);
    Ok(ExitCode::from(u8::from(failed)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::AdmissionRequest;
    use crate::cluster::NoCluster;

    fn job(gpus: &str, backoff: Option<i64>) -> Value {
        let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "wandb", "labels": {"wandb.ai/monitor": "true"}},
            "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "acme/t:1",
                "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}});
        if let Some(b) = backoff {
            j["spec"]["backoffLimit"] = json!(b);
        }
        j
    }

    fn judged(obj: Value) -> Judgement {
        let req = AdmissionRequest::synthetic_create(obj, None).unwrap();
        judge(&Policy::embedded_default(), &req, &NoCluster)
    }

    fn expect(yaml: &str) -> Expectation {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn holding_expectations_give_no_mismatch() {
        let j = judged(job("8", None));
        assert_eq!(
            check(
                &expect("{result: denied, message: exceeds maximum 4, warnings: []}"),
                &j
            ),
            []
        );
        let j = judged(job("1", None));
        let e = expect(
            "{result: allowed, mutated: {spec: {backoffLimit: 0, template: {spec: {containers: [{name: main}]}}}}}",
        );
        assert_eq!(check(&e, &j), []);
    }

    #[test]
    fn rules_and_warnings_are_expected_by_id() {
        let denied = judged(job("8", None));
        let holds = |yaml: &str, j: &Judgement| check(&expect(yaml), j);
        assert_eq!(
            holds("{result: denied, rules: [limits.variables]}", &denied),
            []
        );
        let m = holds("{result: denied, rules: [limits.totals]}", &denied);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].field, "rules");
        assert_eq!(m[0].expected, "a violation of \"limits.totals\"");
        assert!(m[0].got.contains("limits.variables"), "{m:?}");
        let m = holds("{result: denied, rules: []}", &denied);
        assert_eq!(m.len(), 1, "{m:?}");
        let allowed = judged(job("1", None));
        assert_eq!(holds("{result: allowed, rules: []}", &allowed), []);
        // A queue that is not configured: warned about by id.
        let mut unknown = job("1", None);
        unknown["metadata"]["labels"]["launchgate.io/queue"] = json!("nope");
        let warned = judged(unknown);
        assert_eq!(
            holds("{result: allowed, warningRules: [queue.unknown]}", &warned),
            []
        );
        let m = holds(
            "{result: allowed, warningRules: [cache.mountTaken]}",
            &warned,
        );
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].field, "warningRules");
        assert_eq!(m[0].got, "queue.unknown");
        assert_eq!(
            holds("{result: allowed, warningRules: []}", &warned)[0].expected,
            "none"
        );
    }

    #[test]
    fn each_wrong_expectation_is_reported_with_expected_and_got() {
        let j = judged(job("1", None));
        let e = expect(
            "{result: denied, message: [too many], warnings: [nope], mutated: {spec: {backoffLimit: 3, x: 1}}}",
        );
        let m = check(&e, &j);
        let fields: Vec<&str> = m.iter().map(|m| m.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "result",
                "message",
                "warnings",
                "mutated spec.backoffLimit",
                "mutated spec.x"
            ]
        );
        assert_eq!(m[0].expected, "denied");
        assert_eq!(m[0].got, "allowed");
        assert_eq!((m[3].expected.as_str(), m[3].got.as_str()), ("3", "0"));
        assert_eq!(m[4].got, "(absent)");
    }

    #[test]
    fn an_empty_list_in_a_subset_means_empty_not_any() {
        // The mutation mounts the cache into the container.
        let j = judged(job("1", None));
        let e = expect(
            "{result: allowed, mutated: {spec: {template: {spec: {containers: [{volumeMounts: []}]}}}}}",
        );
        let m = check(&e, &j);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(
            m[0].field,
            "mutated spec.template.spec.containers[0].volumeMounts"
        );
        assert_eq!(m[0].expected, "[] (an empty list)");
        assert!(m[0].got.contains("launchgate-cache"), "{}", m[0].got);
        // A list that is empty or absent holds.
        let e = expect(
            "{result: allowed, mutated: {spec: {template: {spec: {tolerations: [], containers: [{ports: []}]}}}}}",
        );
        assert_eq!(check(&e, &j), []);
    }

    #[test]
    fn full_match_reports_extra_fields_and_patch_is_exact() {
        let j = judged(job("1", Some(6)));
        let e = expect("{result: allowed, mutated: {apiVersion: batch/v1}, mutatedMatch: full}");
        let m = check(&e, &j);
        assert!(m.iter().any(|m| m.field == "mutated kind"), "{m:?}");
        assert!(m.iter().any(|m| m.field == "mutated spec"), "{m:?}");
        let mut exact = expect("{result: allowed}");
        exact.patch = Some(serde_json::to_value(&j.mutation.patch).unwrap());
        assert_eq!(check(&exact, &j), []);
        exact.patch = Some(json!([]));
        let m = check(&exact, &j);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].expected, "[] (no change)");
        assert!(m[0].got.contains("/spec/backoffLimit"), "{}", m[0].got);
    }

    #[test]
    fn skipped_is_not_allowed() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "d"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let j = judged(pod);
        assert_eq!(check(&expect("{result: skipped}"), &j), []);
        let m = check(&expect("{result: allowed}"), &j);
        assert!(m[0].got.starts_with("skipped"), "{m:?}");
    }

    #[test]
    fn globs() {
        assert!(glob_match("resources/*.yaml", "resources/a.yaml"));
        assert!(!glob_match("resources/*.yaml", "resources/sub/a.yaml"));
        assert!(glob_match("resources/**/*.yaml", "resources/sub/a.yaml"));
        assert!(glob_match("resources/**/*.yaml", "resources/a.yaml"));
        assert!(glob_match("./r/?.yml", "r/b.yml"));
        assert!(!glob_match("r/?.yml", "r/bc.yml"));
        assert!(!glob_match("*.yaml", "a.json"));
    }

    #[test]
    fn junit_escapes_markup() {
        let suite = SuiteResult {
            file: "a&b.yaml".into(),
            name: "<suite>".into(),
            cases: vec![CaseResult {
                test: "t\"1".into(),
                resource: "r.yaml".into(),
                object: "Job j".into(),
                passed: false,
                mismatches: vec![Mismatch {
                    field: "message".into(),
                    expected: "a <b> \u{1}".into(),
                    got: "c & d".into(),
                }],
            }],
        };
        let xml = render_junit(&[suite]);
        assert!(xml.contains("name=\"&lt;suite&gt;\""), "{xml}");
        assert!(xml.contains("t&quot;1"), "{xml}");
        assert!(
            xml.contains("a &lt;b&gt; ") && xml.contains("c &amp; d"),
            "{xml}"
        );
        assert!(!xml.contains('\u{1}'));
    }

    #[test]
    fn junit_is_well_formed_xml_for_any_text() {
        let nasty = "a\u{0}b\u{8}c\u{b}\u{c}\u{1f}\u{7f}\u{fffe}\u{ffff}\u{d7ff}\u{e000}\u{10ffff} <&>\"' ]]> \r\n\t end";
        let suite = SuiteResult {
            file: nasty.into(),
            name: nasty.into(),
            cases: vec![CaseResult {
                test: nasty.into(),
                resource: nasty.into(),
                object: nasty.into(),
                passed: false,
                mismatches: vec![Mismatch {
                    field: nasty.into(),
                    expected: nasty.into(),
                    got: nasty.into(),
                }],
            }],
        };
        let xml = render_junit(&[suite]);
        let mut reader = quick_xml::Reader::from_str(&xml);
        loop {
            match reader.read_event() {
                Ok(quick_xml::events::Event::Eof) => break,
                Ok(_) => {}
                Err(e) => panic!(
                    "not well-formed at {}: {e}\n{xml}",
                    reader.buffer_position()
                ),
            }
        }
        for c in xml.chars() {
            let ok = matches!(c as u32, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF);
            assert!(ok, "U+{:04X} is not an XML 1.0 character", c as u32);
        }
        assert!(xml.contains("end"));
    }

    #[test]
    fn a_glob_never_picks_up_a_suite_file() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "launchgate-test.yaml",
            "job.yaml",
            "sub/launchgate-test.yml",
            "sub/pod.yaml",
        ] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "kind: Pod\n").unwrap();
        }
        assert_eq!(
            resolve_resources(dir.path(), "*.yaml").unwrap(),
            ["job.yaml"]
        );
        let mut deep = resolve_resources(dir.path(), "**/*.y*ml").unwrap();
        deep.sort();
        assert_eq!(deep, ["job.yaml", "sub/pod.yaml"]);
    }

    #[test]
    fn an_empty_message_list_means_no_denial() {
        let denied = crate::judge::judge(
            &Policy::embedded_default(),
            &crate::admission::AdmissionRequest::synthetic_create(
                serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "namespace": "wandb", "labels": {"wandb.ai/monitor": "true", "queue": "gpu-queue"}},
                    "spec": {"containers": [{"name": "c", "image": "acme/x:1",
                        "resources": {"limits": {"nvidia.com/gpu": "9"}}}]}}),
                None,
            )
            .unwrap(),
            &NoCluster,
        );
        assert!(!denied.allowed());
        let m = check(&expect("{result: denied, message: []}"), &denied);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].expected, "no denial message");
    }
}
