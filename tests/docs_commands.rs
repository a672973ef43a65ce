//! Every command the documentation shows runs here, or names the test that runs it, and every
//! output a page shows must be what the command prints.
//!
//! What is checked, in `README.md` and every page under `docs/`:
//! - A ` ```console ` block: each `$ ` line is a command, the lines up to the next `$ ` its
//!   output (standard output and error, as a terminal shows them). The command must print
//!   exactly those lines (trailing spaces aside). A line `...` stands for any number of lines;
//!   `[..]` inside a line for any text. It must exit 0, unless its output ends with a line
//!   `[exit N]`: then it must exit N (a denial that exits 1, shown as such).
//! - A ` ```sh ` (or `bash`, `shell`) block shows commands without output: the whole block runs
//!   as one `sh -e` script and must exit 0.
//! - Commands run with `sh` in a scratch directory that holds the repository's top-level files
//!   and directories (links to them: what a command reads is the repository's, what it writes
//!   is thrown away), with the `launchgate` binary of this build first on `PATH`;
//!   `cargo run --release -- ARGS` and `cargo run -- ARGS` run that binary with `ARGS`.
//! - A block right after `<!-- docs-test: covered by TEST -->` is run by the test `TEST`
//!   instead (it needs a cluster, or a server that runs until stopped): `e2e::MODULE::FN` is
//!   the function `FN` of `tests/e2e/MODULE.rs`, `TARGET::FN` the function `FN` of
//!   `tests/TARGET.rs`, and a path (`scripts/smoke-serve.sh`) a script CI runs (`.ci/run` names
//!   it). That source must exist, define the function, and name the page (its path), which it
//!   reads or whose commands it runs.
//! - A block right after `<!-- docs-test: not run: REASON -->` is not run. Only commands of
//!   tools no CI machine has may be left so ([`NOT_ON_CI`]: Docker and a registry, a local
//!   kind or minikube cluster, nightly-only and minutes-long tooling, `helm rollback`, a
//!   rollout's wait for pods); the reason must be given.
//! - A block right after `<!-- docs-test: file PATH -->` must be the file PATH of the
//!   repository, byte for byte (a config the page shows is the one its commands read).
//!
//! Every command block is run, covered, or one of those few. `docs/docs-site.md` tells authors
//! the same.

mod common;

use common::docs::{Block, Step, blocks, diff, line_matches, output_matches, steps};

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a documented command may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A page's scratch directory: links to the repository's top-level files and directories, so
/// a command reads the repository's files and what it writes is thrown away with the directory.
struct Scratch(PathBuf);

impl Scratch {
    fn new(page: &str) -> Scratch {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "launchgate-docs-{}-{n}-{}",
            std::process::id(),
            page.replace(['/', '.'], "-")
        ));
        common::docs::reader_dir(&dir).expect("a scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A documented command as it runs here: `cargo run [--release] -- ARGS` is this build's
/// `launchgate ARGS` (the binary the reader's cargo would build and run).
fn as_run(command: &str) -> String {
    command
        .replace("cargo run --release -- ", "launchgate ")
        .replace("cargo run -- ", "launchgate ")
}

/// Runs a command as a reader would, in a page's scratch directory, with this build's binary.
fn run(command: &str, dir: &Path) -> Result<(Vec<String>, i32), String> {
    let path = common::docs::path_with_launchgate();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("{{ {}\n}} 2>&1", as_run(command)))
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting sh: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "still running after {TIMEOUT:?} (a command that runs until stopped is run by a test, named with a `covered by` marker)"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = reader.join().map_err(|_| "reading the output".to_owned())?;
    let code = status.code().unwrap_or(-1);
    Ok((
        text.lines().map(|l| l.trim_end().to_owned()).collect(),
        code,
    ))
}

/// Every page the documentation has: README.md and docs/**/*.md.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let root = common::root();
    let mut out = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut out);
    out
}

/// The fences of blocks that show commands: ` ```console ` (commands and their output) and the
/// shells' (commands alone).
const SHELLS: [&str; 3] = ["sh", "bash", "shell"];

/// The only commands a page may leave unrun, each with why no CI machine runs it: a block
/// marked `not run` must consist of these (after any leading `VAR=value` assignments).
const NOT_ON_CI: [(&str, &str); 10] = [
    ("docker ", "needs Docker and a registry to push to"),
    ("kind ", "makes a local cluster with Docker"),
    ("minikube ", "makes a local cluster in a VM or Docker"),
    (
        "scripts/fuzz-smoke.sh",
        "fuzzes each target for minutes; CI compiles the targets (clippy on fuzz/) and replays their regression inputs (tests/fuzz_regressions.rs)",
    ),
    ("cargo fuzz ", "as scripts/fuzz-smoke.sh"),
    (
        "cargo bench",
        "measures for minutes on a quiet machine; CI compiles the benchmarks (clippy --all-targets)",
    ),
    (
        "cargo build --release",
        "the release build those measurements take; CI builds it for scripts/smoke-serve.sh",
    ),
    (
        "helm rollback",
        "needs the helm binary, which CI machines cannot fetch; the Helm they have (its Go library behind scripts/helm) cannot roll back: it sets no wait strategy, which Helm 4 requires",
    ),
    (
        "kubectl -n launchgate rollout status",
        "waits for pods, which the e2e control plane (no kubelet) never runs; the tests that run a page's install leave the line out and start the pods' program themselves",
    ),
    (
        "./target/release/",
        "the release build under load, measured on a quiet machine (docs/performance.md)",
    ),
];

/// A command without its leading `VAR=value` assignments.
fn without_assignments(command: &str) -> &str {
    let mut rest = command.trim_start();
    while let Some((word, tail)) = rest.split_once(' ')
        && let Some((name, _)) = word.split_once('=')
        && !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        rest = tail.trim_start();
    }
    rest
}

/// The commands of a block as a reader types them: a console block's `$ ` lines, a shell
/// block's lines that are no comment, no continuation and no here-document.
fn commands(block: &Block) -> Vec<String> {
    if block.lang == "console" {
        return steps(&block.body).into_iter().map(|s| s.command).collect();
    }
    let mut out = Vec::new();
    let (mut continued, mut heredoc): (bool, Option<String>) = (false, None);
    for line in &block.body {
        let text = line.trim();
        if let Some(end) = &heredoc {
            if text == end {
                heredoc = None;
            }
            continue;
        }
        let was_continued = continued;
        continued = text.ends_with('\\');
        if was_continued || text.is_empty() || text.starts_with('#') {
            continue;
        }
        if let Some(at) = text.find("<<") {
            let end = text[at + 2..].trim_start_matches('-').trim();
            let end = end.split_whitespace().next().unwrap_or("");
            heredoc = Some(end.trim_matches(['\'', '"']).to_owned());
        }
        out.push(text.to_owned());
    }
    out
}

/// Checks a `covered by TEST` marker of the page `name`: the test's source exists, defines it,
/// is run by CI, and names the page.
fn check_covered(name: &str, test: &str) -> Result<(), String> {
    let root = common::root();
    let (file, function) = if test.contains('/') || test.starts_with('.') {
        (test.to_owned(), None)
    } else {
        let parts: Vec<&str> = test.split("::").collect();
        match parts.as_slice() {
            ["e2e", module, .., function] if parts.len() >= 3 => {
                (format!("tests/e2e/{module}.rs"), Some(*function))
            }
            [target, .., function] if parts.len() >= 2 => {
                (format!("tests/{target}.rs"), Some(*function))
            }
            _ => {
                return Err(format!(
                    "`covered by {test}`: name a test as `e2e::MODULE::FN` or `TARGET::FN`, or a script CI runs"
                ));
            }
        }
    };
    let source = std::fs::read_to_string(root.join(&file))
        .map_err(|e| format!("`covered by {test}`: {file}: {e}"))?;
    match function {
        Some(function) => {
            if !source.contains(&format!("fn {function}(")) {
                return Err(format!(
                    "`covered by {test}`: {file} defines no `fn {function}`"
                ));
            }
        }
        None => {
            let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap_or_default();
            if file != ".ci/run" && !ci.contains(file.trim_start_matches("./")) {
                return Err(format!("`covered by {test}`: .ci/run does not run {file}"));
            }
        }
    }
    // The chart's page is its README, copied; a test may read either.
    let names: &[&str] = if name == "docs/chart.md" {
        &["docs/chart.md", "charts/launchgate/README.md"]
    } else {
        &[name]
    };
    if !names.iter().any(|n| source.contains(n)) {
        return Err(format!(
            "`covered by {test}`: {file} does not name {name}, so nothing ties it to this block"
        ));
    }
    Ok(())
}

/// Checks one page; every problem is appended to `failures`. Returns the commands run.
fn check_page(page: &Path, text: &str, failures: &mut Vec<String>) -> usize {
    let root = common::root();
    let name = page
        .strip_prefix(&root)
        .unwrap_or(page)
        .display()
        .to_string();
    let scratch = Scratch::new(&name);
    let mut ran = 0;
    for block in blocks(text) {
        let at = format!("{name}:{}", block.line);
        let shows_commands = block.lang == "console" || SHELLS.contains(&block.lang.as_str());
        match block.marker.as_deref() {
            Some(m) if m.starts_with("not run:") => {
                if m["not run:".len()..].trim().is_empty() {
                    failures.push(format!("{at}: a `not run` marker must say why"));
                }
                let commands = commands(&block);
                for command in &commands {
                    let command = without_assignments(command);
                    if !NOT_ON_CI.iter().any(|(tool, _)| command.starts_with(tool)) {
                        failures.push(format!(
                            "{at}: `{command}` is left unrun, but CI can run it: run it here, or in the test that covers it (`covered by TEST`)"
                        ));
                    }
                }
                continue;
            }
            Some(m) if m.starts_with("covered by ") => {
                if let Err(e) = check_covered(&name, m["covered by ".len()..].trim()) {
                    failures.push(format!("{at}: {e}"));
                }
                continue;
            }
            Some(m) if m.starts_with("file ") => {
                let file = m["file ".len()..].trim();
                match std::fs::read_to_string(root.join(file)) {
                    Ok(content) => {
                        let shown = block.body.join("\n");
                        if shown.trim_end() != content.trim_end() {
                            failures.push(format!(
                                "{at}: the block is not {file} as it is in the repository\n{}",
                                diff(
                                    &content.lines().map(str::to_owned).collect::<Vec<_>>(),
                                    &block.body
                                )
                            ));
                        }
                    }
                    Err(e) => failures.push(format!("{at}: {file}: {e}")),
                }
                continue;
            }
            Some(other) => {
                failures.push(format!(
                    "{at}: unknown marker `{other}` (`covered by TEST`, `not run: REASON` or `file PATH`)"
                ));
                continue;
            }
            None => {}
        }
        if !shows_commands {
            continue;
        }
        if block.lang != "console" {
            ran += 1;
            let script = format!("set -e\n{}", block.body.join("\n"));
            match run(&script, &scratch.0) {
                Err(e) => failures.push(format!("{at}: {e}")),
                Ok((output, code)) if code != 0 => failures.push(format!(
                    "{at}: the block exits {code}; its output:\n{}",
                    output.join("\n")
                )),
                Ok(_) => {}
            }
            continue;
        }
        let steps = steps(&block.body);
        if steps.is_empty() {
            failures.push(format!("{at}: a console block without a `$ ` command"));
        }
        for step in steps {
            ran += 1;
            let (expected, expected_code) = step.shown();
            match run(&step.command, &scratch.0) {
                Err(e) => failures.push(format!("{at}: $ {}: {e}", step.command)),
                Ok((actual, code)) => {
                    if !output_matches(expected, &actual) {
                        failures.push(format!(
                            "{at}: $ {}\nthe page shows (-) what the command does not print (+):\n{}",
                            step.command,
                            diff(expected, &actual)
                        ));
                    }
                    if code != expected_code {
                        failures.push(format!(
                            "{at}: $ {}\nexits {code}, the page shows {expected_code} (a non-zero exit is shown as a last output line `[exit N]`)",
                            step.command
                        ));
                    }
                }
            }
        }
    }
    ran
}

#[test]
fn every_documented_command_prints_what_its_page_shows() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        ran += check_page(&page, &text, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} problem(s) in the documentation's commands:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran > 0, "no documented command was run");
}

#[test]
fn the_runner_reads_commands_output_and_markers() {
    let page = "text\n\n<!-- docs-test: not run: needs a cluster -->\n```console\n$ kubectl get pods\n```\n\n\
                ```console\n$ echo a \\\n  b\na b\n$ true\n```\n";
    let found = blocks(page);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].marker.as_deref(), Some("not run: needs a cluster"));
    assert_eq!(found[1].marker, None);
    assert_eq!(
        steps(&found[1].body),
        [
            Step {
                command: "echo a \\\n  b".into(),
                expected: vec!["a b".into()]
            },
            Step {
                command: "true".into(),
                expected: vec![]
            }
        ]
    );
}

#[test]
fn a_command_that_exits_otherwise_than_its_page_shows_fails() {
    let page = "```console\n$ false\n```\n\n```console\n$ echo no; exit 3\nno\n[exit 3]\n$ true\n[exit 1]\n```\n";
    let mut failures = Vec::new();
    check_page(&common::root().join("docs/x.md"), page, &mut failures);
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(
        failures[0].contains("$ false\nexits 1, the page shows 0"),
        "{failures:?}"
    );
    assert!(
        failures[1].contains("$ true\nexits 0, the page shows 1"),
        "{failures:?}"
    );
}

#[test]
fn wildcards_match_what_they_stand_for_and_nothing_else() {
    let lines = |s: &str| s.lines().map(str::to_owned).collect::<Vec<_>>();
    assert!(output_matches(&lines("a\n...\nd"), &lines("a\nb\nc\nd")));
    assert!(output_matches(&lines("a\n...\nd"), &lines("a\nd")));
    assert!(!output_matches(&lines("a\n...\nd"), &lines("a\nb")));
    assert!(output_matches(&lines("x [..] z"), &lines("x y y z")));
    assert!(!output_matches(&lines("x [..] z"), &lines("x y y")));
    assert!(!output_matches(&lines("a"), &lines("a\nb")));
    assert!(line_matches("[..]", ""));
}

#[test]
fn a_page_that_shows_other_output_fails_and_says_where() {
    let page = "```console\n$ echo launchgate\nlaunchgat\n```\n\n<!-- docs-test: not run: -->\n```console\n$ x\n```\n";
    let mut failures = Vec::new();
    check_page(&common::root().join("docs/x.md"), page, &mut failures);
    assert_eq!(failures.len(), 3, "{failures:?}");
    assert!(
        failures[0].starts_with("docs/x.md:1: $ echo launchgate"),
        "{failures:?}"
    );
    assert!(
        failures[0].contains("  - launchgat\n  + launchgate"),
        "{failures:?}"
    );
    assert!(failures[1].contains("must say why"), "{failures:?}");
    assert!(
        failures[2].contains("`x` is left unrun, but CI can run it"),
        "{failures:?}"
    );
}

#[test]
fn a_shell_block_runs_as_a_script_and_must_succeed() {
    let page = "```sh\necho one > made.txt\ntest -f made.txt\n```\n\n```sh\ntrue\nfalse\ntrue\n```\n\n\
                ```bash\ncargo run --release -- --version >/dev/null\n```\n";
    let mut failures = Vec::new();
    let ran = check_page(&common::root().join("docs/x.md"), page, &mut failures);
    assert_eq!(ran, 3);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].starts_with("docs/x.md:6: the block exits 1"),
        "{failures:?}"
    );
    assert!(
        !common::root().join("made.txt").exists(),
        "a documented command wrote into the repository"
    );
}

#[test]
fn only_tools_ci_has_not_may_be_left_unrun() {
    let page = "<!-- docs-test: not run: needs Docker -->\n```sh\n# build it\ndocker build -t x . \\\n  --pull\n\
                docker push x\n```\n\n<!-- docs-test: not run: needs a cluster -->\n```sh\nkubectl apply -f - <<'EOF'\n\
                docker: not a command\nEOF\n```\n";
    let mut failures = Vec::new();
    check_page(&common::root().join("docs/x.md"), page, &mut failures);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].starts_with("docs/x.md:10: `kubectl apply -f - <<'EOF'` is left unrun"),
        "{failures:?}"
    );
}

#[test]
fn a_covering_test_must_exist_and_name_the_page() {
    let page = |marker: &str| {
        format!("<!-- docs-test: covered by {marker} -->\n```sh\nkubectl get pods\n```\n")
    };
    let check = |name: &str, marker: &str| {
        let mut failures = Vec::new();
        check_page(&common::root().join(name), &page(marker), &mut failures);
        failures
    };
    // This test names this page below; a real function of a real target.
    assert_eq!(
        check(
            "docs/x.md",
            "docs_commands::a_covering_test_must_exist_and_name_the_page"
        ),
        Vec::<String>::new()
    );
    let missing = check("docs/x.md", "docs_commands::no_such_test");
    assert!(
        missing[0].contains("defines no `fn no_such_test`"),
        "{missing:?}"
    );
    // A page this source never names (the name is built, so it does not appear here whole).
    let unnamed = check(
        concat!("docs/else", "where.md"),
        "docs_commands::a_covering_test_must_exist_and_name_the_page",
    );
    assert!(
        unnamed[0].contains(concat!("does not name docs/else", "where.md")),
        "{unnamed:?}"
    );
    let no_file = check("docs/x.md", "e2e::no_such_module::f");
    assert!(
        no_file[0].contains("tests/e2e/no_such_module.rs"),
        "{no_file:?}"
    );
    let not_ci = check("docs/x.md", "scripts/side-by-side.sh");
    assert!(
        not_ci[0].contains(".ci/run does not run scripts/side-by-side.sh"),
        "{not_ci:?}"
    );
    let shape = check("docs/x.md", "just_a_name");
    assert!(shape[0].contains("name a test as"), "{shape:?}");
}
