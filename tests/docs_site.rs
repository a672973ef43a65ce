//! The README's first screen and the documentation site's table of contents: the two set-up
//! commands the README gives are the ones CI runs, and every page under docs/ is in the site.

mod common;

use std::fmt::Write as _;
use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(common::root().join(path))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The commands of a shell block: each line without its comment, trimmed.
fn commands(block: &str) -> Vec<String> {
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap_or("").trim().to_owned())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The README's first code block, before any section heading.
fn readme_setup_commands() -> Vec<String> {
    let readme = read("README.md");
    let first_screen = readme.split("\n## ").next().unwrap();
    let block = first_screen
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("README: a ```sh block before the first section");
    commands(block)
}

#[test]
fn the_readme_starts_with_the_two_setup_commands_ci_runs() {
    assert_eq!(
        readme_setup_commands(),
        ["cargo run --release -- serve", "./scripts/test.sh"],
        "README.md: the first screen gives the serve command and the test command"
    );
    let ci = commands(&read(".ci/run"));
    // The test command, as the README gives it.
    assert!(
        ci.iter().any(|l| l == "./scripts/test.sh"),
        ".ci/run does not run ./scripts/test.sh: {ci:?}"
    );
    // The serve command, through the smoke run: `cargo run --release -- serve` is the release
    // build of the binary run as `launchgate serve`, with no other argument.
    assert!(ci.iter().any(|l| l == "./scripts/smoke-serve.sh"), "{ci:?}");
    let smoke = commands(&read("scripts/smoke-serve.sh"));
    assert!(
        smoke.iter().any(|l| l.starts_with("cargo build --release")),
        "scripts/smoke-serve.sh does not build the release binary: {smoke:?}"
    );
    assert!(
        smoke
            .iter()
            .any(|l| l.starts_with("./target/release/launchgate serve >")),
        "scripts/smoke-serve.sh does not run `launchgate serve` without arguments: {smoke:?}"
    );
    // And the site is built and its links checked.
    assert!(
        ci.iter().any(|l| l == "./scripts/docs.sh --check"),
        "{ci:?}"
    );
    // And every generated file is checked against the code before the tests run.
    let at = |command: &str| ci.iter().position(|l| l == command);
    assert!(
        at("./scripts/generate.sh --check") < at("./scripts/test.sh")
            && at("./scripts/generate.sh --check").is_some(),
        ".ci/run does not run ./scripts/generate.sh --check before ./scripts/test.sh: {ci:?}"
    );
}

#[test]
fn the_readme_fits_on_a_screen_or_two() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 150,
        "README.md has {lines} lines; the rest belongs in docs/"
    );
}

fn markdown_files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            let docs = common::root().join("docs");
            out.push(
                path.strip_prefix(&docs)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

#[test]
fn every_page_under_docs_is_in_the_site() {
    let summary = read("docs/SUMMARY.md");
    let mut pages = Vec::new();
    markdown_files(&common::root().join("docs"), &mut pages);
    pages.sort();
    let missing: Vec<&String> = pages
        .iter()
        .filter(|p| *p != "SUMMARY.md" && !summary.contains(&format!("]({p})")))
        .collect();
    assert!(
        missing.is_empty(),
        "pages under docs/ that docs/SUMMARY.md does not list (mdBook would leave them out of the site): {missing:?}"
    );
}

/// READMEs of the repository that are pages of the site too: (the README, its page under docs/).
/// The page is the README with its links made the site's; `UPDATE_DOCS=1 cargo test --test
/// docs_site` writes it, and this test fails when a committed page differs from its README.
const SITE_COPIES: &[(&str, &str)] = &[
    ("charts/launchgate/README.md", "docs/chart.md"),
    ("manifests/README.md", "docs/manifests.md"),
];

/// `a/b/../c` → `a/c`.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// A link of the README at `source` as the site's page under docs/ writes it: a page of the
/// site (`queue-limits.md#…`, another copied README's page), or `None` when the file is not on
/// the site.
fn site_link(source: &str, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
        return Some(target.to_owned());
    }
    let (path, fragment) = match target.split_once('#') {
        Some((p, f)) => (p, format!("#{f}")),
        None => (target, String::new()),
    };
    let dir = source.rsplit_once('/').map_or("", |(d, _)| d);
    let repo_path = normalize(&format!("{dir}/{path}"));
    if let Some(&(_, page)) = SITE_COPIES.iter().find(|(readme, _)| *readme == repo_path) {
        return Some(format!("{}{fragment}", page.trim_start_matches("docs/")));
    }
    repo_path
        .strip_prefix("docs/")
        .map(|page| format!("{page}{fragment}"))
}

/// The README at `source` as a page of the site.
fn site_copy(source: &str, text: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        let mut line = line.to_owned();
        if !in_code {
            let mut rewritten = String::new();
            let mut rest = line.as_str();
            // `[text](target)`: each link either stays a link, to the site's page, or becomes
            // the text and the file's path in the repository.
            while let Some(open) = rest.find("](") {
                let Some(start) = rest[..open].rfind('[') else {
                    break;
                };
                let Some(close) = rest[open + 2..].find(')') else {
                    break;
                };
                let label = &rest[start + 1..open];
                let target = &rest[open + 2..open + 2 + close];
                rewritten.push_str(&rest[..start]);
                match site_link(source, target) {
                    Some(link) => {
                        let _ = write!(rewritten, "[{label}]({link})");
                    }
                    None => {
                        let dir = source.rsplit_once('/').map_or("", |(d, _)| d);
                        let file =
                            normalize(&format!("{dir}/{}", target.split('#').next().unwrap_or("")));
                        if label.trim_matches('`') == file {
                            let _ = write!(rewritten, "`{file}`");
                        } else {
                            let _ = write!(rewritten, "{label} (`{file}` in the repository)");
                        }
                    }
                }
                rest = &rest[open + 2 + close + 1..];
            }
            rewritten.push_str(rest);
            line = rewritten;
        }
        out.push_str(&line);
        out.push('\n');
        if i == 0 {
            let _ = write!(
                out,
                "\n<!-- The site's copy of {source}, its links made the site's; do not edit: \
                 UPDATE_DOCS=1 cargo test --test docs_site writes it again. -->\n"
            );
        }
    }
    out
}

#[test]
fn the_chart_and_manifests_readmes_are_pages_of_the_site() {
    let mut stale = Vec::new();
    for (readme, page) in SITE_COPIES {
        let copy = site_copy(readme, &read(readme));
        let file = common::root().join(page);
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&file, &copy).unwrap();
        } else if std::fs::read_to_string(&file).unwrap_or_default() != copy {
            stale.push(*page);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from their READMEs: UPDATE_DOCS=1 cargo test --test docs_site writes them"
    );
}

#[test]
fn a_copied_readme_links_the_site_or_names_the_file() {
    let text = "# Chart\n[install](../../docs/install.md#helm), [manifests](../../manifests/README.md), \
                [`certs/README.md`](../../certs/README.md), [the top](../../README.md) and \
                [web](https://example.com).\n```\n[x](../../y.md)\n```\n";
    let copy = site_copy("charts/launchgate/README.md", text);
    let body: Vec<&str> = copy.lines().collect();
    assert_eq!(
        body[3],
        "[install](install.md#helm), [manifests](manifests.md), `certs/README.md`, \
         the top (`README.md` in the repository) and [web](https://example.com)."
    );
    assert_eq!(body[5], "[x](../../y.md)", "code is left as it is");
}

/// The Kubernetes version the compatibility page says the end-to-end suite runs is the one it
/// runs: the `kube-apiserver` of `KUBEBUILDER_ASSETS` (or of `./scripts/k8s-assets.sh`'s
/// `target/k8s-assets`). Without the binary this says so and passes, unless
/// `LAUNCHGATE_E2E_REQUIRED=1` (CI).
#[test]
fn the_compatibility_page_names_the_kubernetes_version_the_e2e_suite_runs() {
    let dir = std::env::var_os("KUBEBUILDER_ASSETS")
        .or_else(|| std::env::var_os("LAUNCHGATE_E2E_ASSETS"))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| common::root().join("target/k8s-assets"));
    let apiserver = dir.join("kube-apiserver");
    if !apiserver.is_file() {
        let required =
            std::env::var("LAUNCHGATE_E2E_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0");
        assert!(
            !required,
            "LAUNCHGATE_E2E_REQUIRED is set and {} is missing",
            apiserver.display()
        );
        eprintln!("SKIPPED: no kube-apiserver to read the e2e suite's Kubernetes version from");
        return;
    }
    let out = std::process::Command::new(&apiserver)
        .arg("--version")
        .output()
        .expect("running kube-apiserver --version");
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .find(|w| w.starts_with('v'))
        .unwrap_or_else(|| panic!("no version in {text:?}"));
    let page = read("docs/compatibility.md");
    let line = page
        .lines()
        .find(|l| l.contains("the end-to-end suite runs on"))
        .expect("docs/compatibility.md: the end-to-end suite's row");
    assert!(
        line.ends_with(&format!("| {version} |")),
        "docs/compatibility.md says the e2e suite runs {line:?}; it runs {version}"
    );
}

/// CHANGELOG.md is in Keep a Changelog form: `## [Unreleased]` first, then one
/// `## [x.y.z] - YYYY-MM-DD` per version, newest first, the newest being the crate's version
/// (and the chart's `version` and `appVersion`), with only Keep a Changelog's kinds of change
/// under each.
#[test]
fn the_changelog_keeps_a_changelog_and_names_the_crates_version() {
    let changelog = read("CHANGELOG.md");
    let versions: Vec<&str> = changelog
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .collect();
    assert_eq!(versions.first(), Some(&"[Unreleased]"), "{versions:?}");
    let released = &versions[1..];
    assert!(!released.is_empty(), "CHANGELOG.md has no version heading");
    for heading in released {
        let (version, date) = heading
            .strip_prefix('[')
            .and_then(|h| h.split_once("] - "))
            .unwrap_or_else(|| {
                panic!("CHANGELOG.md: `## {heading}` is not `## [x.y.z] - YYYY-MM-DD`")
            });
        assert_eq!(version.split('.').count(), 3, "{heading}");
        assert!(
            date.len() == 10 && date.chars().filter(|c| *c == '-').count() == 2,
            "{heading}"
        );
    }
    let cargo = read("Cargo.toml");
    let crate_version = cargo
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("Cargo.toml: version");
    assert!(
        released[0].starts_with(&format!("[{crate_version}] - ")),
        "CHANGELOG.md's newest version is {:?}, the crate's {crate_version}",
        released[0]
    );
    let chart = read("charts/launchgate/Chart.yaml");
    for key in ["version: ", "appVersion: "] {
        let value = chart
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim_matches('"'))
            .unwrap_or_else(|| panic!("Chart.yaml: {key}"));
        assert_eq!(value, crate_version, "Chart.yaml {key}");
    }
    let kinds = [
        "Added",
        "Changed",
        "Deprecated",
        "Removed",
        "Fixed",
        "Security",
    ];
    for l in changelog.lines().filter_map(|l| l.strip_prefix("### ")) {
        assert!(
            kinds.contains(&l),
            "CHANGELOG.md: `### {l}` is none of {kinds:?}"
        );
    }
}

/// docs/launch-workloads.md's table has a row for every kind launchgate judges, each row's
/// "Job defaults" names every field the kind's descriptor writes (by its last key, or its map
/// as `map.*`), and its "PyTorch wiring" says `never` exactly for the kinds the generated kinds
/// page (docs/reference/kinds.md, from `pytorch::WIRING`) says are never wired.
#[test]
fn the_launch_workloads_table_names_every_kind_and_the_defaults_it_writes() {
    let page = read("docs/launch-workloads.md");
    let rows: Vec<Vec<&str>> = page
        .lines()
        .skip_while(|l| !l.starts_with("| kind | pod templates |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect();
    let mut errors = Vec::new();
    for kind in launchgate::WorkloadKind::all() {
        let spec = kind.spec();
        let api_version = kind.api_version();
        let matching: Vec<&Vec<&str>> = rows
            .iter()
            .filter(|row| {
                let cell = row[0];
                if spec.group.is_empty() {
                    cell == spec.kind
                } else {
                    cell.contains(spec.kind) && cell.contains(&api_version)
                }
            })
            .collect();
        let [row] = matching.as_slice() else {
            errors.push(format!(
                "{} ({api_version}): {} rows, want 1",
                spec.kind,
                matching.len()
            ));
            continue;
        };
        let never = wiring_on_kinds_page(spec.kind, &api_version).starts_with("never");
        if row[4].starts_with("never") != never {
            errors.push(format!(
                "{} ({api_version}): the PyTorch wiring cell {:?} {} with `never`, and the kinds page says it is {}",
                spec.kind,
                row[4],
                if never { "does not start" } else { "starts" },
                if never { "never wired" } else { "wired" },
            ));
        }
        let defaults = row[3];
        for default in spec.run.defaults {
            let field = default.at.last().copied().unwrap_or_default();
            let map = default.at.len().checked_sub(2).map(|i| default.at[i]);
            let named = defaults.contains(&format!("`{field}`"))
                || defaults.contains(&format!(".{field}`"))
                || map.is_some_and(|m| defaults.contains(&format!("`{m}.*`")));
            if !named {
                errors.push(format!(
                    "{} ({api_version}): the Job defaults cell does not name `{}`",
                    spec.kind,
                    default.at.join(".")
                ));
            }
        }
    }
    assert!(
        errors.is_empty(),
        "docs/launch-workloads.md:\n{}",
        errors.join("\n")
    );
}

/// The "PyTorch wiring" line of the kind's section on the generated kinds page
/// (docs/reference/kinds.md), found by its `kind` and API version.
fn wiring_on_kinds_page(kind: &str, api_version: &str) -> String {
    let page = read("docs/reference/kinds.md");
    let section = page
        .split("\n## ")
        .skip(1)
        .find(|s| {
            s.starts_with(&format!("{kind} ("))
                && s.contains(&format!("**API version:** `{api_version}`"))
        })
        .unwrap_or_else(|| panic!("docs/reference/kinds.md: no section of {kind} {api_version}"));
    section
        .lines()
        .find_map(|l| l.strip_prefix("- **PyTorch wiring:** "))
        .unwrap_or_else(|| panic!("docs/reference/kinds.md: {kind} has no PyTorch wiring line"))
        .to_string()
}

/// The chart README's webhook `rules` row names every kind's resource (and each subresource
/// the webhooks take), and its values table has every kind's `webhook.rules` switch (both
/// generated from the registry by `UPDATE_SCHEMA=1 cargo test --test config_schema`).
#[test]
fn the_chart_readme_names_every_kind_the_webhooks_take() {
    let readme = read("charts/launchgate/README.md");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `rules` |"))
        .expect("charts/launchgate/README.md: the webhook `rules` row");
    let mut errors = Vec::new();
    for kind in launchgate::WorkloadKind::all() {
        let spec = kind.spec();
        if !row.contains(spec.resource) {
            errors.push(format!("the `rules` row lacks {}", spec.resource));
        }
        for sub in spec.subresources {
            let sub = format!("`{}/{sub}`", spec.resource);
            if !row.contains(&sub) {
                errors.push(format!("the `rules` row lacks {sub}"));
            }
        }
        let switch = format!("| `webhook.rules.{}` | `true` |", spec.webhook_rule);
        if !readme.lines().any(|l| l.starts_with(&switch)) {
            errors.push(format!("the values table lacks {switch}"));
        }
    }
    assert!(
        errors.is_empty(),
        "charts/launchgate/README.md:\n{}",
        errors.join("\n")
    );
}

/// The emergency bypass is one text: the chart README (and so its site copy) shows the
/// runbook's two blocks — the bypass and the way back — line for line, and the runbook names
/// the e2e test that runs them on a real API server.
#[test]
fn the_emergency_bypass_is_the_runbooks_text_wherever_it_is_shown() {
    let runbook = common::runbook();
    for which in ["on", "off"] {
        let text = common::emergency_bypass_block(&runbook, which);
        assert!(
            text.iter().any(|l| l.contains("launchgate.io/bypass")),
            "the runbook's `{which}` block names no annotation: {text:?}"
        );
        for page in ["charts/launchgate/README.md", "docs/chart.md"] {
            assert_eq!(
                common::emergency_bypass_block(&common::root().join(page), which),
                text,
                "{page}: the emergency bypass `{which}` block differs from docs/operations.md's"
            );
        }
    }
    assert!(
        read("docs/operations.md")
            .contains("bypass::the_documented_bypass_holds_while_launchgate_runs"),
        "the runbook does not name the e2e test that runs its bypass"
    );
}
