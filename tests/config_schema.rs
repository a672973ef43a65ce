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

/// The chart's list of intermediate owners (its webhook for the StatefulSets a LeaderWorkerSet's
/// pods come from) is the kind descriptors'; `UPDATE_SCHEMA=1` regenerates it too.
#[test]
fn chart_intermediates_match_the_kind_descriptors() {
    check_chart_file(
        "files/intermediates.json",
        &launchgate::native::webhooks::chart_intermediates(),
        "the kind descriptors",
    );
}

/// The LaunchQueue CRD, generated from the config's queue types (the schema the config
/// reference is written from), ships in the chart's `crds/` and in `manifests/`;
/// `UPDATE_SCHEMA=1` regenerates both.
#[test]
fn the_launchqueue_crd_is_the_config_schemas() {
    let generated = launchgate::policy::launchqueue::crd();
    let text = format!(
        "# The LaunchQueue CRD, generated from launchgate's config types: {REGENERATE_HINT}.\n{}",
        serde_yaml::to_string(&generated).unwrap()
    );
    for file in [
        "charts/launchgate/crds/launchqueues.launchgate.io.yaml",
        "manifests/launchqueues.launchgate.io.yaml",
    ] {
        let path = common::root().join(file);
        if std::env::var_os("UPDATE_SCHEMA").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let current: Value = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_yaml::from_str(&t).ok())
            .unwrap_or(Value::Null);
        assert!(
            current == generated,
            "{file} is out of date with the config types: {REGENERATE_HINT}"
        );
    }
    // The spec's keys are a queue's keys, as the config reference lists them.
    let spec = &generated["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    let config = launchgate::policy::config_json_schema();
    assert_eq!(
        spec.as_object().unwrap().keys().collect::<Vec<_>>(),
        config["definitions"]["QueueConfig"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>()
    );
    let reference =
        std::fs::read_to_string(common::root().join("docs/reference/config.md")).unwrap();
    for key in spec.as_object().unwrap().keys() {
        assert!(
            reference.contains(&format!("`queues.<name>.{key}")),
            "docs/reference/config.md lacks queues.<name>.{key}"
        );
    }
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

/// Where the chart's `launch-workload` condition looks for labels is where the server's does
/// (`native::webhooks::chart_label_carriers`, from the kind descriptors); `UPDATE_SCHEMA=1`
/// regenerates it too.
#[test]
fn chart_label_carriers_are_the_servers() {
    check_chart_file(
        "files/label-carriers.json",
        &launchgate::native::webhooks::chart_label_carriers(),
        "the kind descriptors' pod templates",
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

/// What the server watches with `clusterLookups` (the chart's RBAC for it: a ClusterRole, or a
/// Role in each of `ownerWatch.namespaces` and a ClusterRole for what is cluster-scoped) is the
/// server's own list, from the kind descriptors; `UPDATE_SCHEMA=1` regenerates it too.
#[test]
fn chart_watched_resources_are_what_the_server_watches() {
    let watched = serde_json::to_value(launchgate::server::owner_cache::watched()).unwrap();
    check_chart_file("files/watched.json", &watched, "what the server watches");
}

/// How a kind's `webhook.rules` switch is described: the API version and the resources its
/// rules cover (with its scale subresource), and the kind's name in the registry.
fn rule_description(kind: &Value) -> String {
    let text = |key: &str| kind[key].as_str().unwrap_or_default();
    let group = match text("group") {
        "" => "core",
        group => group,
    };
    let mut resources: Vec<&str> = kind["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(scale) = kind["scale"].as_str() {
        resources.push(scale);
    }
    let name = launchgate::WorkloadKind::all()
        .find(|k| k.spec().webhook_rule == text("rule"))
        .map_or("", |k| k.as_str());
    format!(
        "{group}/{} {} ({name})",
        text("version"),
        resources.join(", ")
    )
}

/// The registry's kinds as the chart lists them ([`common::chart_kinds`]).
fn kinds() -> Vec<Value> {
    common::chart_kinds()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A kind served by a CRD (its API group has a dot; Kubernetes' own groups have none).
fn from_crd(kind: &Value) -> bool {
    kind["group"].as_str().is_some_and(|g| g.contains('.'))
}

/// The text file `file` (from the repository root) with `generated` in place of its lines
/// `region` picks, or written so with `UPDATE_SCHEMA=1`; `what` names the region for the
/// failure. `region` gives the range of the lines to replace, or `None` when the file has no
/// such region (a failure).
fn check_region(
    file: &str,
    what: &str,
    region: impl Fn(&[&str]) -> Option<std::ops::Range<usize>>,
    generated: Vec<String>,
) {
    let path = common::root().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let lines: Vec<&str> = text.lines().collect();
    let range = region(&lines).unwrap_or_else(|| panic!("{file}: no {what} to generate"));
    let mut out: Vec<String> = lines[..range.start].iter().map(|l| l.to_string()).collect();
    out.extend(generated);
    out.extend(lines[range.end..].iter().map(|l| l.to_string()));
    let mut new = out.join("\n");
    new.push('\n');
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, new).unwrap();
        return;
    }
    assert!(
        new == text,
        "{file}: {what} is out of date with the kind registry: {}",
        launchgate::policy::REGENERATE_HINT
    );
}

/// The lines after the line `start` (the first one after `marker`), as long as they are indented
/// by `indent`.
fn block_after(
    marker: &'static str,
    start: &'static str,
    indent: &'static str,
) -> impl Fn(&[&str]) -> Option<std::ops::Range<usize>> {
    move |lines| {
        let at = lines.iter().position(|l| l.trim() == marker)?;
        let head = at + lines[at..].iter().position(|l| *l == start)?;
        let len = lines[head + 1..]
            .iter()
            .take_while(|l| l.starts_with(indent))
            .count();
        Some(head + 1..head + 1 + len)
    }
}

/// The run of lines starting with `prefix`.
fn lines_starting(prefix: &'static str) -> impl Fn(&[&str]) -> Option<std::ops::Range<usize>> {
    move |lines| {
        let at = lines.iter().position(|l| l.starts_with(prefix))?;
        let len = lines[at..]
            .iter()
            .take_while(|l| l.starts_with(prefix))
            .count();
        Some(at..at + len)
    }
}

/// The marker above each generated `webhook.rules` list of the chart's values files.
const RULES_MARKER: &str =
    "# One switch per kind of the kind registry: UPDATE_SCHEMA=1 cargo test --test config_schema";

/// `values.yaml` has one `webhook.rules` switch per registered kind, on, described by what it
/// covers; `UPDATE_SCHEMA=1` regenerates them.
#[test]
fn chart_values_list_every_kinds_switch() {
    let lines = kinds()
        .iter()
        .flat_map(|k| {
            [
                format!("    # -- {}", rule_description(k)),
                format!("    {}: true", k["rule"].as_str().unwrap_or_default()),
            ]
        })
        .collect();
    check_region(
        "charts/launchgate/values.yaml",
        "the webhook.rules switches",
        block_after(RULES_MARKER, "  rules:", "    "),
        lines,
    );
}

/// The CI values that run without the CRDs (`ci/cert-manager-values.yaml`) turn off the rules
/// of every kind a CRD serves; `UPDATE_SCHEMA=1` regenerates them.
#[test]
fn chart_ci_values_turn_off_every_crd_kind() {
    let lines = kinds()
        .iter()
        .filter(|k| from_crd(k))
        .map(|k| format!("    {}: false", k["rule"].as_str().unwrap_or_default()))
        .collect();
    check_region(
        "charts/launchgate/ci/cert-manager-values.yaml",
        "the webhook.rules switches",
        block_after(RULES_MARKER, "  rules:", "    "),
        lines,
    );
}

/// The chart README's values table has a row for each kind's `webhook.rules` switch, and its
/// table of the webhook's settings lists every kind's resources in its `rules` row;
/// `UPDATE_SCHEMA=1` regenerates them.
#[test]
fn chart_readme_lists_every_kind() {
    const README: &str = "charts/launchgate/README.md";
    let rows = kinds()
        .iter()
        .map(|k| {
            format!(
                "| `webhook.rules.{}` | `true` | {}. |",
                k["rule"].as_str().unwrap_or_default(),
                rule_description(k)
            )
        })
        .collect();
    check_region(
        README,
        "the webhook.rules rows",
        lines_starting("| `webhook.rules."),
        rows,
    );
    let covered: Vec<String> = kinds()
        .iter()
        .map(|k| {
            let mut resources: Vec<String> = k["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|r| format!("`{r}`"))
                .collect();
            if let Some(scale) = k["scale"].as_str() {
                resources.push(format!("`{scale}`"));
            }
            let group = match k["group"].as_str().unwrap_or_default() {
                "" => "core",
                group => group,
            };
            format!("{} of {group}", resources.join(", "))
        })
        .collect();
    let row = format!(
        "| `rules` | {} ([every kind](../../docs/reference/kinds.md)); `CREATE`, `UPDATE` (a scale subresource: `UPDATE`) | only what can change what a limit covers: never `DELETE` (no object), never `status`, never leases/configmaps/nodes |",
        covered.join("; ")
    );
    check_region(
        README,
        "the rules row",
        lines_starting("| `rules` |"),
        vec![row],
    );
}
