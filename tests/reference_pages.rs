//! The documentation's reference pages (`docs/reference/`) are written from the code and never
//! by hand: this test writes them again and fails when a committed page differs.
//! `UPDATE_REFERENCE=1 cargo test --test reference_pages` rewrites them.

mod common;

use launchgate::reference::{
    REGENERATE_HINT, chart_values_page, cli_page, config_page, kinds_list, kinds_page,
    metrics_page, rules_page, serve_flags,
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
fn kinds_reference_matches_the_kind_registry() {
    check("docs/reference/kinds.md", Ok(kinds_page()));
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
    check("docs/reference/rules.md", rules_page());
}

/// The metric families of an OpenMetrics exposition (its `# TYPE` lines).
fn families(exposition: &str) -> std::collections::BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Every metric family a running `serve` exports, after answering a mutate and a validate
/// review, has its row on the metrics page (the page is written from a registry built like the
/// server's; this catches a metric registered only where the server starts).
#[tokio::test]
async fn a_running_server_exports_only_metrics_the_page_documents() {
    let server = common::start_default().await;
    let review = std::fs::read(
        common::root().join("tests/fixtures/admission/create-job-launch-acme-mnist.json"),
    )
    .unwrap();
    for path in ["/mutate", "/validate"] {
        let status = server.post(path, review.clone()).await.status();
        assert!(status.is_success(), "{path}: {status}");
    }
    let exported = families(&server.metrics().await);
    assert!(
        exported.contains("launchgate_admission_requests")
            && exported.contains("launchgate_memory_budget_bytes"),
        "the scrape is not the server's registry: {exported:?}"
    );
    let page = read("docs/reference/metrics.md");
    let documented: std::collections::BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect();
    let undocumented: Vec<&String> = exported.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "a running server exports metrics docs/reference/metrics.md does not document: \
         {undocumented:?} ({REGENERATE_HINT}; a family only the server registers must be in \
         the registry the page is written from, launchgate::reference::metrics_page)"
    );
    // (A family appears once it has a series, so a documented one may be absent here.)
}

/// docs/compatibility.md lists each kind's API version as the kind registry has it
/// (`UPDATE_REFERENCE=1` rewrites the list).
#[test]
fn the_compatibility_page_lists_each_kinds_version() {
    let path = common::root().join("docs/compatibility.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let (head, rest) = page
        .split_once("<!-- kinds:begin -->\n")
        .expect("docs/compatibility.md: <!-- kinds:begin -->");
    let (listed, tail) = rest
        .split_once("<!-- kinds:end -->")
        .expect("docs/compatibility.md: <!-- kinds:end -->");
    let list = kinds_list();
    if std::env::var_os("UPDATE_REFERENCE").is_some() {
        std::fs::write(
            &path,
            format!("{head}<!-- kinds:begin -->\n{list}<!-- kinds:end -->{tail}"),
        )
        .unwrap();
        return;
    }
    assert_eq!(listed, list, "docs/compatibility.md: {REGENERATE_HINT}");
}

/// docs/serve.md's flag table names every flag of `launchgate serve` (its descriptions are
/// the page's; the generated one is docs/reference/cli.md).
#[test]
fn the_serve_page_names_every_serve_flag() {
    let page = read("docs/serve.md");
    let table: Vec<&str> = page.lines().filter(|l| l.starts_with("| `--")).collect();
    let flags = serve_flags();
    assert!(flags.len() > 20, "serve's flags: {flags:?}");
    let missing: Vec<&String> = flags
        .iter()
        .filter(|flag| {
            !table
                .iter()
                .any(|row| row.contains(&format!("`{flag}`")) || row.contains(&format!("`{flag} ")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/serve.md: the flag table lacks {missing:?}"
    );
}
