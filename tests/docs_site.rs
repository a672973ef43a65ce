//! The README's first screen and the documentation site's table of contents: the two set-up
//! commands the README gives are the ones CI runs, and every page under docs/ is in the site.

mod common;

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
