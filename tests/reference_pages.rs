//! The documentation's reference pages (`docs/reference/`) are written from the code and never
//! by hand: this test writes them again and fails when a committed page differs.
//! `UPDATE_REFERENCE=1 cargo test --test reference_pages` rewrites them.

mod common;

use launchgate::reference::{
    NoticeDoc, REGENERATE_HINT, RuleDoc, chart_values_page, cli_page, config_page, metrics_page,
    rules_page,
};
use serde_json::Value;

fn read(path: &str) -> String {
    std::fs::read_to_string(common::root().join(path))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Compares a generated page with the committed one (or writes it, with UPDATE_REFERENCE).
fn check(path: &str, generated: Result<String, String>) {
    let generated = generated.unwrap_or_else(|e| panic!("{path}: {e}"));
    let file = common::root().join(path);
    if std::env::var_os("UPDATE_REFERENCE").is_some() {
        std::fs::write(&file, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || committed.lines().count().min(generated.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "{path} is out of date with the code (first difference at line {line}): {REGENERATE_HINT}"
        );
    }
}

#[test]
fn config_reference_matches_the_config_types() {
    check("docs/reference/config.md", config_page());
}

#[test]
fn cli_reference_matches_the_clap_definition() {
    check("docs/reference/cli.md", cli_page());
}

#[test]
fn metrics_reference_matches_the_registry() {
    check("docs/reference/metrics.md", metrics_page());
}

#[test]
fn chart_values_reference_matches_the_values_schema() {
    let schema: Value =
        serde_json::from_str(&read("charts/launchgate/values.schema.json")).unwrap();
    check(
        "docs/reference/chart-values.md",
        chart_values_page(
            &schema,
            &read("charts/launchgate/values.yaml"),
            &read("charts/launchgate/README.md"),
        ),
    );
}

#[test]
fn rules_reference_matches_the_rule_table() {
    let table = launchgate::rules::reference();
    let notes: Vec<String> = table
        .iter()
        .map(|r| {
            if r.native {
                format!("CEL: {}", r.native_note)
            } else {
                format!("webhook only: {}", r.native_note)
            }
        })
        .collect();
    let docs: Vec<RuleDoc<'_>> = table
        .iter()
        .zip(&notes)
        .map(|(r, native)| RuleDoc {
            id: r.id,
            config_key: r.config_key,
            meaning: r.meaning,
            what_to_do: r.action,
            on_update: r.update,
            native,
        })
        .collect();
    let notices: Vec<NoticeDoc<'_>> = launchgate::rules::notice_reference()
        .into_iter()
        .map(|n| NoticeDoc {
            id: n.id,
            source: n.source,
            meaning: n.meaning,
            what_to_do: n.action,
        })
        .collect();
    check("docs/reference/rules.md", rules_page(&docs, &notices));
}
