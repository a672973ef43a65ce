//! The reference pages of the documentation site (`docs/reference/`), written from the code:
//! the config keys from the config's JSON Schema (the config types' doc comments), the command
//! line from its clap definition, the metrics from the registry `/metrics` encodes, the Helm
//! chart's values from its `values.schema.json` and `values.yaml`. A key, flag or metric
//! without a description is an error here, so it cannot reach a release undocumented.
//! `cargo test --test reference_pages` compares the committed pages with these;
//! `UPDATE_REFERENCE=1` rewrites them.

use crate::cli::Cli;
use crate::kinds::WorkloadKind;
use crate::policy::config_json_schema;
use crate::rules::{NOTICES, Native, Notice, RULES, Rule};
use crate::server::metrics::Metrics;
use clap::CommandFactory;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// How to rewrite the pages after changing what they describe.
pub const REGENERATE_HINT: &str =
    "UPDATE_REFERENCE=1 cargo test --test reference_pages rewrites docs/reference/";

/// What every generated page starts with.
fn header(title: &str, source: &str) -> String {
    format!(
        "# {title}\n\n<!-- Generated from {source} by launchgate::reference; do not edit: \
         {REGENERATE_HINT}. -->\n\n"
    )
}

/// A table cell: one line, `|` escaped, `<`/`>` escaped outside code spans (so a `<name>`
/// stays text, not an HTML tag).
fn cell(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::new();
    for (i, part) in one_line.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        if i % 2 == 0 {
            out.push_str(
                &part
                    .replace('<', "&lt;")
                    .replace('>', "&gt;")
                    .replace('*', "\\*"),
            );
        } else {
            out.push_str(part);
        }
    }
    out.replace('|', "\\|")
}

/// A value as inline code (compact JSON).
fn code(value: &Value) -> String {
    let text = match value {
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    };
    format!("`{}`", text.replace('|', "\\|"))
}

// ---------------------------------------------------------------------------------------------
// Config keys

/// One key of a JSON Schema, flattened.
struct KeyRow {
    path: String,
    kind: String,
    default: Option<Value>,
    description: Option<String>,
}

/// Reads a JSON Schema's properties into rows, following `$ref`s into `definitions`.
struct SchemaWalk<'a> {
    definitions: &'a serde_json::Map<String, Value>,
    rows: Vec<KeyRow>,
}

impl<'a> SchemaWalk<'a> {
    fn definition(&self, reference: &str) -> Option<(&'a str, &'a Value)> {
        let name = reference.strip_prefix("#/definitions/")?;
        self.definitions
            .get_key_value(name)
            .map(|(k, v)| (k.as_str(), v))
    }

    /// The schema a node stands for: its `$ref`, its one `allOf` entry, or the non-null branch
    /// of an `anyOf` (an optional value).
    fn target(&self, node: &'a Value) -> (&'a Value, Option<&'a str>) {
        if let Some(r) = node.get("$ref").and_then(Value::as_str)
            && let Some((name, def)) = self.definition(r)
        {
            let (inner, _) = self.target(def);
            return (inner, Some(name));
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(list) = node.get(key).and_then(Value::as_array) {
                let non_null: Vec<&Value> = list
                    .iter()
                    .filter(|v| v.get("type").and_then(Value::as_str) != Some("null"))
                    .collect();
                if non_null.len() == 1 && non_null[0].get("$ref").is_some() {
                    return self.target(non_null[0]);
                }
            }
        }
        (node, None)
    }

    fn type_name(&self, node: &Value) -> String {
        if let Some(r) = node.get("$ref").and_then(Value::as_str)
            && let Some((name, def)) = self.definition(r)
        {
            return if def.get("properties").is_some() {
                "object".into()
            } else {
                let inner = self.type_name(def);
                if inner.is_empty() { name.into() } else { inner }
            };
        }
        if let Some(values) = node.get("enum").and_then(Value::as_array) {
            return values.iter().map(code).collect::<Vec<_>>().join(" or ");
        }
        if let Some(c) = node.get("const") {
            return code(c);
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(list) = node.get(key).and_then(Value::as_array) {
                let mut names: Vec<String> = Vec::new();
                let mut optional = false;
                for branch in list {
                    if branch.get("type").and_then(Value::as_str) == Some("null") {
                        optional = true;
                        continue;
                    }
                    let name = self.type_name(branch);
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                let mut text = names.join(" or ");
                if optional {
                    text.push_str(" or null");
                }
                return text;
            }
        }
        let types: Vec<&str> = match node.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            _ => return String::new(),
        };
        types
            .iter()
            .map(|t| match *t {
                // Items of any type (`true`, `{}`) are just an array.
                "array" => match node.get("items").map(|items| self.type_name(items)) {
                    Some(items) if !items.is_empty() => format!("array of {items}"),
                    _ => "array".into(),
                },
                "object" => match node.get("additionalProperties") {
                    Some(ap) if ap.is_object() => format!("map of {}", self.type_name(ap)),
                    _ => "object".into(),
                },
                other => other.into(),
            })
            .collect::<Vec<_>>()
            .join(" or ")
    }

    fn walk(&mut self, node: &'a Value, prefix: &str, seen: &mut Vec<&'a str>) {
        let (node, name) = self.target(node);
        if let Some(name) = name {
            if seen.contains(&name) {
                return;
            }
            seen.push(name);
        }
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (key, prop) in props {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                let (target, _) = self.target(prop);
                let description = prop
                    .get("description")
                    .or_else(|| target.get("description"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.rows.push(KeyRow {
                    path: path.clone(),
                    kind: self.type_name(prop),
                    default: prop.get("default").cloned(),
                    description,
                });
                self.children(prop, &path, seen);
            }
        }
        if name.is_some() {
            seen.pop();
        }
    }

    /// The keys under a property: its object's, a map's values', an array's items'.
    fn children(&mut self, prop: &'a Value, path: &str, seen: &mut Vec<&'a str>) {
        let (target, _) = self.target(prop);
        if target.get("properties").is_some() {
            self.walk(prop, path, seen);
            return;
        }
        if let Some(ap) = target.get("additionalProperties").filter(|v| v.is_object()) {
            self.walk(ap, &format!("{path}.<name>"), seen);
        }
        if let Some(items) = target.get("items") {
            self.walk(items, &format!("{path}[]"), seen);
        }
        // A value of several shapes (a map or a list of the same entries): the keys of the
        // first shape that has any.
        if let Some(shapes) = target.get("anyOf").and_then(Value::as_array) {
            let before = self.rows.len();
            for shape in shapes {
                self.children(shape, path, seen);
                if self.rows.len() > before {
                    break;
                }
            }
        }
    }
}

/// Whether a default is worth a column entry: leaves, lists and maps, not whole sections
/// (their keys have rows of their own).
fn shown_default(row: &KeyRow, has_children: bool) -> String {
    match &row.default {
        Some(v) if !(has_children && v.is_object()) => code(v),
        _ => String::new(),
    }
}

/// Every key of a JSON Schema (subschemas under `definitions`), in the schema's order.
fn key_rows(schema: &Value) -> Vec<KeyRow> {
    let empty = serde_json::Map::new();
    let mut walk = SchemaWalk {
        definitions: schema
            .get("definitions")
            .and_then(Value::as_object)
            .unwrap_or(&empty),
        rows: Vec::new(),
    };
    walk.walk(schema, "", &mut Vec::new());
    walk.rows
}

/// An error starting with `problem` that lists the rows without a description, if any.
fn undescribed(rows: &[KeyRow], problem: &str) -> Result<(), String> {
    let missing: Vec<&str> = rows
        .iter()
        .filter(|r| r.description.as_deref().is_none_or(|d| d.trim().is_empty()))
        .map(|r| r.path.as_str())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("{problem}: {}", missing.join(", ")))
    }
}

fn key_table(rows: &[KeyRow], out: &mut String) {
    out.push_str("| key | type | default | description |\n|---|---|---|---|\n");
    for (i, row) in rows.iter().enumerate() {
        let has_children = rows
            .get(i + 1)
            .is_some_and(|next| next.path.starts_with(&row.path) && next.path != row.path);
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            row.path.replace('|', "\\|"),
            cell(&row.kind),
            shown_default(row, has_children),
            cell(row.description.as_deref().unwrap_or_default()),
        );
    }
}

/// `docs/reference/config.md`: every key of the config file, from its JSON Schema.
pub fn config_page() -> Result<String, String> {
    config_page_from(&config_json_schema())
}

/// The config page from a config JSON Schema (draft-07, subschemas under `definitions`).
pub fn config_page_from(schema: &Value) -> Result<String, String> {
    let rows = key_rows(schema);
    undescribed(
        &rows,
        "config keys without a description (write a doc comment on the field)",
    )?;
    let mut out = header("Configuration keys", "the config types' JSON Schema");
    out.push_str(
        "Every key of launchgate's config file (`--config`; the chart's `config` value), with \
         its type, its default when the key is left out and what it does. `<name>` is a key \
         you choose (a queue's name); `[]` is each entry of a list. How the file is checked and \
         reloaded: [The configuration file](../configuration.md).\n\n",
    );
    key_table(&rows, &mut out);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Command line

fn arg_name(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    if names.is_empty() {
        return format!("`{value}`");
    }
    let value = match arg.get_action() {
        clap::ArgAction::Set | clap::ArgAction::Append => format!(" {value}"),
        _ => String::new(),
    };
    format!("`{}{value}`", names.join(", "))
}

fn command_section(cmd: &clap::Command, path: &str, out: &mut String, missing: &mut Vec<String>) {
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    if about.trim().is_empty() {
        missing.push(format!("`{path}` (the command)"));
    }
    let _ = writeln!(out, "## `{path}`\n");
    if !about.is_empty() {
        let about = about.trim();
        let stop = if about.ends_with('.') { "" } else { "." };
        let _ = writeln!(out, "{about}{stop}\n");
    }
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !args.is_empty() {
        out.push_str("| argument | env | default | description |\n|---|---|---|---|\n");
        for arg in args {
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|s| s.to_string())
                .unwrap_or_default();
            if help.trim().is_empty() {
                missing.push(format!("`{path} {}`", arg_name(arg).trim_matches('`')));
            }
            let env = arg
                .get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_default();
            // A default under the temporary directory is written as `$TMPDIR/…`: the page
            // must not depend on the machine it is generated on.
            let tmp = std::env::temp_dir()
                .to_string_lossy()
                .trim_end_matches('/')
                .to_owned();
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| {
                    let v = v.to_string_lossy();
                    match v.strip_prefix(tmp.as_str()) {
                        Some(rest) if !tmp.is_empty() => format!("$TMPDIR{rest}"),
                        _ => v.into_owned(),
                    }
                })
                .collect();
            let default = match defaults.as_slice() {
                [] => String::new(),
                [one] if one.is_empty() => "`\"\"`".to_owned(),
                _ => format!("`{}`", defaults.join(",")),
            };
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| format!("`{}`", v.get_name()))
                .collect();
            let mut description = cell(&help);
            if !description.ends_with('.') {
                description.push('.');
            }
            if !values.is_empty() && !matches!(arg.get_action(), clap::ArgAction::SetTrue) {
                let _ = write!(description, " One of {}.", values.join(", "));
            }
            let _ = writeln!(
                out,
                "| {} | {env} | {} | {description} |",
                arg_name(arg).replace('|', "\\|"),
                default.replace('|', "\\|"),
            );
        }
        out.push('\n');
    }
    for sub in subcommands(cmd) {
        command_section(sub, &format!("{path} {}", sub.get_name()), out, missing);
    }
}

/// The subcommands a user sees: not hidden, not clap's own `help`.
fn subcommands(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// The long flags of `launchgate serve` a user sees (`--listen`, …), from the clap definition:
/// the page on the server's flags names each of them.
pub fn serve_flags() -> Vec<String> {
    let cli = Cli::command();
    cli.find_subcommand("serve")
        .map(|serve| {
            serve
                .get_arguments()
                .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
                .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
                .collect()
        })
        .unwrap_or_default()
}

/// `docs/reference/cli.md`: every command and flag, from the clap definition.
pub fn cli_page() -> Result<String, String> {
    cli_page_from(Cli::command())
}

/// The command-line page of a clap command (`launchgate`'s, or another for a test).
pub fn cli_page_from(mut cmd: clap::Command) -> Result<String, String> {
    cmd.build();
    let name = cmd.get_name().to_owned();
    let mut body = String::new();
    let mut missing = Vec::new();
    for sub in subcommands(&cmd) {
        command_section(
            sub,
            &format!("{name} {}", sub.get_name()),
            &mut body,
            &mut missing,
        );
    }
    if !missing.is_empty() {
        return Err(format!(
            "commands or arguments without help text (write a doc comment on them): {}",
            missing.join(", ")
        ));
    }
    let mut out = header("Command line", "the clap definition of `launchgate`");
    out.push_str(
        "Every command of `launchgate` and every argument, with the environment variable that \
         sets it and its default. `launchgate <command> --help` prints the same. What the \
         commands are for: [The command line](../cli.md); the server's endpoints and how its \
         flags interact: [Endpoints and serve flags](../serve.md).\n\n",
    );
    out.push_str(&body);
    Ok(out.trim_end().to_owned() + "\n")
}

// ---------------------------------------------------------------------------------------------
// Metrics

/// One metric as `/metrics` describes it.
#[derive(Debug, Default)]
struct MetricRow {
    kind: String,
    help: String,
    labels: BTreeSet<String>,
    samples: BTreeSet<String>,
}

/// Reads the OpenMetrics text of a registry: HELP, TYPE, the sample names and label names.
fn parse_exposition(text: &str) -> BTreeMap<String, MetricRow> {
    let mut metrics: BTreeMap<String, MetricRow> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            metrics.entry(name.into()).or_default().help = help.into();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            metrics.entry(name.into()).or_default().kind = kind.into();
        } else if !line.starts_with('#') && !line.is_empty() {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let sample = &line[..name_end];
            let Some(family) = metrics
                .keys()
                .filter(|f| sample.starts_with(f.as_str()))
                .max_by_key(|f| f.len())
                .cloned()
            else {
                continue;
            };
            let row = metrics.get_mut(&family).expect("found above");
            row.samples.insert(sample.into());
            if let Some(labels) = line[name_end..]
                .strip_prefix('{')
                .and_then(|l| l.split_once('}'))
                .map(|(l, _)| l)
            {
                for pair in labels.split("\",") {
                    if let Some((label, _)) = pair.split_once('=')
                        && label != "le"
                    {
                        row.labels.insert(label.trim_matches(',').into());
                    }
                }
            }
        }
    }
    metrics
}

/// `docs/reference/metrics.md`: every metric `/metrics` exports, from the registry.
pub fn metrics_page() -> Result<String, String> {
    let mut metrics = Metrics::with_example_series();
    // `serve` adds the memory budget's gauges to the same registry.
    crate::server::budget::MemoryBudget::new(0).register(&mut metrics.registry);
    metrics_page_from(&metrics.encode())
}

/// The metrics page from an OpenMetrics exposition in which every family has a series.
pub fn metrics_page_from(exposition: &str) -> Result<String, String> {
    let metrics = parse_exposition(exposition);
    let mut problems = Vec::new();
    for (name, row) in &metrics {
        if row.help.trim().is_empty() {
            problems.push(format!("{name} has no help text"));
        }
        if row.samples.is_empty() {
            problems.push(format!(
                "{name} has no series to read its labels from (give it one in Metrics::with_example_series)"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(format!("metrics: {}", problems.join("; ")));
    }
    let mut out = header("Metrics", "the metrics registry");
    out.push_str(
        "Everything `GET /metrics` exports (OpenMetrics text; with `--admin-listen` also over \
         plain HTTP), with the series names to query and their labels. What to alert on: \
         [Operations](../operations.md#what-to-alert-on); the decision log and Events next to \
         them: [Decision log, Events and metrics](../operations.md#decision-log-events-and-metrics).\n\n",
    );
    out.push_str("| metric | type | labels | description |\n|---|---|---|---|\n");
    for (name, row) in &metrics {
        let series: Vec<String> = row.samples.iter().map(|s| format!("`{s}`")).collect();
        let labels: Vec<String> = row.labels.iter().map(|l| format!("`{l}`")).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            if series.len() == 1 && series[0] == format!("`{name}`") {
                series[0].clone()
            } else {
                format!("`{name}`: {}", series.join(", "))
            },
            row.kind,
            labels.join(", "),
            cell(&row.help),
        );
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Chart values

/// The `# -- ` comments of a Helm values file (the helm-docs convention), by dotted key.
fn values_comments(values_yaml: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<String> = None;
    for line in values_yaml.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(text) = trimmed.strip_prefix("# -- ") {
            pending = Some(text.trim().to_owned());
            continue;
        }
        if let Some(text) = trimmed.strip_prefix('#') {
            if let Some(p) = pending.as_mut() {
                p.push(' ');
                p.push_str(text.trim());
            }
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('-') {
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        if key.contains(' ') || key.contains('"') {
            pending = None;
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let path = stack
            .iter()
            .map(|(_, k)| k.as_str())
            .chain([key])
            .collect::<Vec<_>>()
            .join(".");
        if let Some(text) = pending.take() {
            out.insert(path.clone(), text);
        }
        stack.push((indent, key.to_owned()));
    }
    out
}

/// The description column of a values table in a chart README, by key.
fn readme_table(readme: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in readme.lines() {
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let Some((key, rest)) = rest.split_once("` |") else {
            continue;
        };
        // ` default | description |`: an empty description column is no description.
        let row = rest.trim().trim_end_matches('|').trim_end();
        let description = row.split_once(" | ").map_or("", |(_, d)| d.trim());
        if !description.is_empty() {
            out.entry(key.to_owned())
                .or_insert_with(|| description.to_owned());
        }
    }
    out
}

fn lookup<'v>(values: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(values, |v, k| v.get(k))
}

/// `docs/reference/chart-values.md`: every value of the Helm chart, from `values.schema.json`
/// (types), `values.yaml` (defaults, `# --` comments) and the chart README's values tables.
pub fn chart_values_page(
    schema: &Value,
    values_yaml: &str,
    chart_readme: &str,
) -> Result<String, String> {
    let values: Value =
        serde_yaml::from_str(values_yaml).map_err(|e| format!("values.yaml: {e}"))?;
    let comments = values_comments(values_yaml);
    let table = readme_table(chart_readme);
    let mut top = schema.clone();
    if let Some(props) = top.get_mut("properties").and_then(Value::as_object_mut)
        && let Some(config) = props.get_mut("config")
    {
        // The config's keys are the config page's.
        *config = serde_json::json!({
            "type": "object",
            "description": "launchgate's configuration (the ConfigMap's config.yaml): every key is in [Configuration keys](config.md)."
        });
    }
    let mut rows = key_rows(&top);
    let described = |path: &str| comments.get(path).or_else(|| table.get(path)).cloned();
    let paths: Vec<String> = rows.iter().map(|r| r.path.clone()).collect();
    for row in &mut rows {
        if row.default.is_none() {
            row.default = lookup(&values, &row.path).cloned();
        }
        if row.description.is_none() {
            row.description = described(&row.path);
        }
        if row.description.is_none() {
            let section = format!("{}.", row.path);
            if paths.iter().any(|p| p.starts_with(&section)) {
                row.description = Some(format!("The `{section}*` values below."));
            }
        }
        // A part of a value described as a whole (an issuerRef's name, a list entry's field).
        let mut parent = row.path.as_str();
        while row.description.is_none() {
            let Some(cut) = parent.rfind(['.', '[']) else {
                break;
            };
            parent = &parent[..cut];
            if let Some(d) = described(parent) {
                row.description = Some(format!("Part of `{parent}`: {d}"));
            }
        }
    }
    undescribed(
        &rows,
        "chart values without a description (a `# --` comment in values.yaml or the chart \
         README's values table)",
    )?;
    let mut out = header(
        "Helm chart values",
        "charts/launchgate/values.schema.json and values.yaml",
    );
    out.push_str(
        "Every value of the chart `charts/launchgate` that its `values.schema.json` accepts, \
         with its type, its default in `values.yaml` and what it does (the schema's \
         description, else the value's `# --` comment in `values.yaml`, else the chart \
         README's values table). A value the schema does not know fails `helm install`.\n\n",
    );
    key_table(&rows, &mut out);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Workload kinds

/// The kinds and the API version each is read at, one line each (the compatibility page's
/// list between `<!-- kinds:begin -->` and `<!-- kinds:end -->`).
pub fn kinds_list() -> String {
    WorkloadKind::all()
        .map(|k| format!("- {} — `{}`\n", k.api_kind(), k.api_version()))
        .collect()
}

/// `docs/reference/kinds.md`: every workload kind launchgate judges, from the kind registry
/// (`src/kinds/`): the API version each is served at (the CRD version its controller must
/// serve), its name among the webhook's rules, and how Kueue and the native policies treat it.
pub fn kinds_page() -> String {
    use crate::kinds::Kueue;
    let mut out = header("Workload kinds", "the kind registry (src/kinds/)");
    out.push_str(
        "Every kind launchgate judges, one section each: the API version it is read at (for a \
         custom resource, the CRD version its operator must serve; another version of the same \
         resource reaches launchgate converted to this one under the webhooks' `matchPolicy: \
         Equivalent`), its name among the webhook's rules (`serve --webhook-rules`, the chart's \
         `webhook.rules`), how Kueue and the native admission policies treat it, and whether \
         launchgate wires its distributed PyTorch (the queue's `pytorch` settings; \
         [Distributed PyTorch](../distributed-pytorch.md)). Which Kubernetes versions: \
         [Compatibility](../compatibility.md).\n",
    );
    for kind in WorkloadKind::all() {
        let k = kind.spec();
        let api_version = kind.api_version();
        let kueue = match k.kueue {
            Kueue::Suspends(field) => format!("managed (admitted by `{field}`)"),
            Kueue::Gates => {
                "managed by its labels (its pods held by scheduling gates until admitted)"
                    .to_owned()
            }
            Kueue::Pod => "managed as a plain pod (scheduling gate)".to_owned(),
            Kueue::No(why) => format!("not managed: {why}"),
        };
        let native = match k.native {
            Ok(()) => "compiled".to_owned(),
            Err(why) => format!("webhook only: {}", cell(why)),
        };
        let pytorch = match crate::pytorch::wiring_of(kind) {
            Some(w) if w.problems.is_some() => {
                "wired; one that can never rendezvous is denied or warned about (the \
                 queue's `onUnwirable`)"
            }
            Some(_) => "wired",
            None => "never: no PyTorch env is written, and none is denied as unwirable",
        };
        let _ = write!(
            out,
            "\n## {} ({})\n\n- **API version:** `{api_version}` (resource `{}`)\n- **Webhook rule:** `{}`\n- **Kueue:** {kueue}\n- **Native policies:** {native}\n- **PyTorch wiring:** {pytorch}\n",
            k.kind,
            if k.group.is_empty() { "core" } else { k.group },
            k.resource,
            k.webhook_rule,
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Denials and warnings

/// `docs/reference/rules.md`: every denial and warning, from [`RULES`] and [`NOTICES`].
pub fn rules_page() -> Result<String, String> {
    rules_page_from(RULES, NOTICES)
}

/// A page of every denial and warning, from rule and notice tables: one section per rule,
/// then one per notice, in the tables' order. One without a meaning or a remedy is an error.
pub fn rules_page_from(rules: &[&Rule], notices: &[&Notice]) -> Result<String, String> {
    let missing: Vec<&str> = rules
        .iter()
        .filter(|r| r.meaning.trim().is_empty() || r.action.trim().is_empty())
        .map(|r| r.id)
        .chain(
            notices
                .iter()
                .filter(|n| n.meaning.trim().is_empty() || n.action.trim().is_empty())
                .map(|n| n.id),
        )
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "rules without a meaning or what to do: {}",
            missing.join(", ")
        ));
    }
    let mut out = header("Denials and warnings", "the rule table");
    out.push_str(
        "Every denial launchgate gives (a warning under `warn` enforcement, counted under \
         `audit`), by rule id — the id `launchgate_violations_total{rule}`, the decision log, \
         Events (`launchgate.io/rules`) and audit reports carry — with the config key behind \
         it, what it means, what to do, how an UPDATE is judged, and how the native admission \
         policies hold it.\n\n\
         Whatever the rule, an UPDATE that brings an object into a queue (it was no launch \
         workload, or another queue's) was never judged there: it is judged as a CREATE, by \
         every rule, with nothing carried over from the old object.\n",
    );
    for r in rules {
        let anchor = crate::rules::anchor(r.id);
        let native = match r.native {
            Native::Cel(how) => format!("CEL: {how}"),
            Native::WebhookOnly(why) => format!("webhook only: {why}"),
        };
        let _ = write!(
            out,
            "\n<a id=\"{anchor}\"></a>\n\n## `{}`\n\n- **Config key:** `{}`\n- **Meaning:** {}\n- **What to do:** {}\n- **On UPDATE:** {}\n- **Native policies:** {}\n",
            r.id,
            r.config_key,
            cell(r.meaning),
            cell(r.action),
            cell(r.update.describe()),
            cell(&native)
        );
    }
    out.push_str(
        "\n## Warnings\n\n\
         Besides the rules' violations answered with a warning (under their rule's id above), \
         launchgate warns about what it did to a workload, or left undone, under these ids: \
         `launchgate_warnings_total{rule}`, the decision log's `warning_rules`, Events, \
         `validate -o yaml` and audit reports carry them.\n",
    );
    for n in notices {
        let anchor = crate::rules::anchor(n.id);
        let _ = write!(
            out,
            "\n<a id=\"{anchor}\"></a>\n\n### `{}`\n\n- **Given by:** `{}`\n- **Meaning:** {}\n- **What to do:** {}\n",
            n.id,
            n.source,
            cell(n.meaning),
            cell(n.action),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_key_without_a_description_is_an_error() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "documented": {"type": "string", "description": "Said."},
                "queues": {
                    "type": "object",
                    "description": "Queues.",
                    "additionalProperties": {"$ref": "#/definitions/Queue"}
                }
            },
            "definitions": {
                "Queue": {"type": "object", "properties": {"silent": {"type": "integer"}}}
            }
        });
        let err = config_page_from(&schema).unwrap_err();
        assert!(err.contains("queues.<name>.silent"), "{err}");
        assert!(!err.contains("documented"), "{err}");
    }

    #[test]
    fn a_flag_or_command_without_help_is_an_error() {
        use clap::{Arg, Command};
        let cli = Command::new("launchgate").subcommand(
            Command::new("serve")
                .about("Serve.")
                .arg(Arg::new("listen").long("listen").help("Where."))
                .arg(Arg::new("silent").long("silent")),
        );
        let err = cli_page_from(cli).unwrap_err();
        assert!(err.contains("`launchgate serve --silent SILENT`"), "{err}");
        assert!(!err.contains("--listen"), "{err}");
        let quiet = Command::new("launchgate").subcommand(Command::new("check"));
        assert!(
            cli_page_from(quiet)
                .unwrap_err()
                .contains("`launchgate check` (the command)")
        );
    }

    #[test]
    fn a_metric_without_help_or_series_is_an_error() {
        let text = "# HELP a_total \n# TYPE a_total counter\na_total 1\n\
                    # HELP b Said.\n# TYPE b counter\n# EOF\n";
        let err = metrics_page_from(text).unwrap_err();
        assert!(err.contains("a_total has no help"), "{err}");
        assert!(err.contains("b has no series"), "{err}");
    }

    #[test]
    fn metric_labels_are_read_from_the_series() {
        let text =
            "# HELP x Requests.\n# TYPE x counter\nx_total{endpoint=\"/m\",queue=\"a,b\"} 1\n";
        let page = metrics_page_from(text).unwrap();
        assert!(page.contains("`endpoint`, `queue`"), "{page}");
        assert!(page.contains("`x_total`"), "{page}");
    }

    #[test]
    fn a_rule_without_a_remedy_is_an_error() {
        use crate::rules::{Denies, OnUpdate};
        let rule = Rule {
            id: "limits.variables",
            config_key: "limits.variables",
            meaning: "Too many GPUs.",
            action: "",
            native: Native::Cel("CEL"),
            update: OnUpdate::Grown,
            denies: Denies::LimitsEnforcement,
        };
        assert!(
            rules_page_from(&[&rule], &[])
                .unwrap_err()
                .contains("limits.variables")
        );
        let fine = Rule {
            action: "Ask for fewer.",
            ..rule
        };
        assert!(
            rules_page_from(&[&fine], &[])
                .unwrap()
                .contains("## `limits.variables`")
        );
        let notice = Notice {
            id: "cache.mountTaken",
            source: "cache",
            meaning: "Taken.",
            action: "",
        };
        assert!(
            rules_page_from(&[&fine], &[&notice])
                .unwrap_err()
                .contains("cache.mountTaken")
        );
        let moved = Notice {
            action: "Move it.",
            ..notice
        };
        let page = rules_page_from(&[&fine], &[&moved]).unwrap();
        assert!(page.contains("### `cache.mountTaken`"), "{page}");
    }

    #[test]
    fn a_chart_value_without_a_description_is_an_error_and_an_empty_column_is_none() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "said": {"type": "string"},
                "silent": {"type": "string"},
                "kinds": {"type": "array", "items": true}
            }
        });
        let readme = "| `said` | `a` | Said. |\n| `silent` | `b` | |\n| `kinds` | `[]` | Any. |\n";
        let err =
            chart_values_page(&schema, "said: a\nsilent: b\nkinds: []\n", readme).unwrap_err();
        assert!(err.ends_with(": silent"), "{err}");
        let page = chart_values_page(
            &schema,
            "said: a\n# -- Told.\nsilent: b\nkinds: []\n",
            readme,
        )
        .unwrap();
        assert!(page.contains("| `kinds` | array | `[]` | Any. |"), "{page}");
        assert!(
            page.contains("| `silent` | string | `\"b\"` | Told. |"),
            "{page}"
        );
    }

    #[test]
    fn table_cells_escape_pipes_and_angle_brackets_outside_code() {
        assert_eq!(
            cell("a | b <name> `<x>` *.yaml"),
            "a \\| b &lt;name&gt; `<x>` \\*.yaml"
        );
    }
}
