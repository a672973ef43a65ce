//! The chart's `values.schema.json` describes `config` with the schema generated from the
//! server's config types, so `helm install`/`upgrade` rejects a config the server would
//! reject by shape. `UPDATE_SCHEMA=1 cargo test --test config_schema` regenerates it.

mod common;

use launchgate::policy::{REGENERATE_HINT, chart_values_schema};
use serde_json::Value;

#[test]
fn chart_values_schema_matches_the_config_types() {
    let path = common::root().join("charts/launchgate/values.schema.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let current: Value = serde_json::from_str(&text).unwrap();
    let generated = chart_values_schema(&current);
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        let mut out = serde_json::to_string_pretty(&generated).unwrap();
        out.push('\n');
        std::fs::write(&path, out).unwrap();
        return;
    }
    assert!(
        current == generated,
        "charts/launchgate/values.schema.json is out of date with the config types: {REGENERATE_HINT}"
    );
}

/// The chart's list of kinds (its webhook rules, the rules the server registers, the audit's
/// read access) is the kind descriptors'; `UPDATE_SCHEMA=1` regenerates it too.
#[test]
fn chart_kinds_match_the_kind_descriptors() {
    check_chart_file(
        "files/kinds.json",
        &common::chart_kinds(),
        "the kind descriptors",
    );
}

/// The chart file `file` (under charts/launchgate/) is `generated`, or is written from it with
/// `UPDATE_SCHEMA=1`; `what` says what it must agree with.
fn check_chart_file(file: &str, generated: &Value, what: &str) {
    let path = common::root().join("charts/launchgate").join(file);
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        let mut out = serde_json::to_string_pretty(generated).unwrap();
        out.push('\n');
        std::fs::write(&path, out).unwrap();
        return;
    }
    let current: Value = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    assert!(
        &current == generated,
        "charts/launchgate/{file} is out of date with {what}: {REGENERATE_HINT}"
    );
}

/// The dormant form the chart creates each native policy slot in is the server's
/// (`native::chart_slot_file`); `UPDATE_SCHEMA=1` regenerates it too.
#[test]
fn chart_native_slot_is_the_servers_dormant_form() {
    check_chart_file(
        "files/native-slot.json",
        &launchgate::native::chart_slot_file(),
        "the server's dormant slot",
    );
}

/// The chart's default `match` labels (what its webhook `matchConditions` read where
/// `config.match` leaves a list out) are the server's; `UPDATE_SCHEMA=1` regenerates them too.
#[test]
fn chart_match_labels_are_the_servers_defaults() {
    check_chart_file(
        "files/match-labels.json",
        &launchgate::policy::chart_match_labels(),
        "the server's defaults",
    );
}
