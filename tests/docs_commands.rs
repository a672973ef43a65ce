//! Every command the documentation shows with its output runs here, and its output must be
//! the page's: a page cannot show output the binary does not give.
//!
//! What is checked, in `README.md` and every page under `docs/`:
//! - A ` ```console ` block: each `$ ` line is a command, the lines up to the next `$ ` its
//!   output (standard output and error, as a terminal shows them). The command runs with `sh`
//!   in the repository's root, with the `launchgate` binary of this build first on `PATH`, and
//!   must print exactly those lines (trailing spaces aside). A line `...` stands for any number
//!   of lines; `[..]` inside a line for any text. It must exit 0, unless its output ends with a
//!   line `[exit N]`: then it must exit N (a denial that exits 1, shown as such).
//! - A block right after `<!-- docs-test: file PATH -->` must be the file PATH of the repository,
//!   byte for byte (a config the page shows is the one its commands read).
//! - A block right after `<!-- docs-test: not run: REASON -->` is not run; the reason (a cluster,
//!   a registry, a server that runs until stopped) is what a reader is told and must not be
//!   empty. Every ` ```console ` block is either run or carries this marker.
//!
//! `docs/docs-site.md` tells authors the same.

mod common;

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a documented command may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A fenced block of a Markdown page.
#[derive(Debug)]
struct Block {
    /// The line of its opening fence (1-based).
    line: usize,
    /// The first word of the fence's info string (`console`, `yaml`…).
    lang: String,
    /// Its lines.
    body: Vec<String>,
    /// The `<!-- docs-test: … -->` marker right before it, if any.
    marker: Option<String>,
}

/// The fenced blocks of a page, with the marker comment above each.
fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    let mut previous: Option<&str> = None;
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim_start();
        let fence = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        let Some(fence) = fence else {
            if !line.trim().is_empty() {
                previous = Some(line.trim());
            }
            continue;
        };
        let indent = line.len() - trimmed.len();
        let lang = trimmed[fence.len()..]
            .split([',', ' '])
            .next()
            .unwrap_or("")
            .to_owned();
        let marker = previous
            .and_then(|p| p.strip_prefix("<!-- docs-test:"))
            .and_then(|p| p.strip_suffix("-->"))
            .map(|m| m.trim().to_owned());
        let mut body = Vec::new();
        for (_, l) in lines.by_ref() {
            if l.trim_start().starts_with(fence) && l.trim() == fence {
                break;
            }
            body.push(l.get(indent..).unwrap_or(l.trim_start()).to_owned());
        }
        out.push(Block {
            line: i + 1,
            lang,
            body,
            marker,
        });
        previous = None;
    }
    out
}

/// A command of a console block and the output the page shows for it.
#[derive(Debug, PartialEq)]
struct Step {
    command: String,
    expected: Vec<String>,
}

impl Step {
    /// The output the page shows, without an `[exit N]` line, and the exit code it shows (0
    /// without one).
    fn shown(&self) -> (&[String], i32) {
        match self.expected.split_last() {
            Some((last, rest)) => match last
                .strip_prefix("[exit ")
                .and_then(|l| l.strip_suffix(']'))
                .and_then(|n| n.parse().ok())
            {
                Some(code) => (rest, code),
                None => (&self.expected, 0),
            },
            None => (&self.expected, 0),
        }
    }
}

/// The commands of a console block (`$ ` lines, `\` continuations joined) and their output.
fn steps(body: &[String]) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in body {
        if continued && let Some(step) = out.last_mut() {
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            out.push(Step {
                command: command.to_owned(),
                expected: Vec::new(),
            });
            continued = command.ends_with('\\');
        } else if let Some(step) = out.last_mut() {
            step.expected.push(line.clone());
        }
    }
    out
}

/// Whether one output line matches the page's line (`[..]` for any text).
fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split("[..]").collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let Some(mut rest) = actual.strip_prefix(parts[0]) else {
        return false;
    };
    let last = parts.len() - 1;
    for (i, part) in parts.iter().enumerate().skip(1) {
        if i == last {
            return rest.ends_with(part) && rest.len() >= part.len();
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether the output matches the page's lines (`...` for any number of lines).
fn output_matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=actual.len()).any(|skip| output_matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(a, tail)| line_matches(first, a) && output_matches(rest, tail)),
    }
}

/// Runs a command as a reader would, in the repository's root, with this build's binary.
fn run(command: &str) -> Result<(Vec<String>, i32), String> {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_launchgate"));
    let bin_dir = bin.parent().expect("the binary is in a directory");
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("{{ {command}\n}} 2>&1"))
        .current_dir(common::root())
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
                "still running after {TIMEOUT:?} (a command that runs until stopped needs a `not run` marker)"
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

/// Checks one page; every problem is appended to `failures`. Returns the commands run.
fn check_page(page: &Path, text: &str, failures: &mut Vec<String>) -> usize {
    let root = common::root();
    let name = page
        .strip_prefix(&root)
        .unwrap_or(page)
        .display()
        .to_string();
    let mut ran = 0;
    for block in blocks(text) {
        let at = format!("{name}:{}", block.line);
        match block.marker.as_deref() {
            Some(m) if m.starts_with("not run:") => {
                if m["not run:".len()..].trim().is_empty() {
                    failures.push(format!("{at}: a `not run` marker must say why"));
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
                    "{at}: unknown marker `{other}` (`not run: REASON` or `file PATH`)"
                ));
                continue;
            }
            None => {}
        }
        if block.lang != "console" {
            continue;
        }
        let steps = steps(&block.body);
        if steps.is_empty() {
            failures.push(format!("{at}: a console block without a `$ ` command"));
        }
        for step in steps {
            ran += 1;
            let (expected, expected_code) = step.shown();
            match run(&step.command) {
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

/// A line diff, page first: `-` page only, `+` output only, ` ` both.
fn diff(expected: &[String], actual: &[String]) -> String {
    // Longest common subsequence, small inputs.
    let (n, m) = (expected.len(), actual.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if line_matches(&expected[i], &actual[j]) {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < n || j < m {
        if i < n && j < m && line_matches(&expected[i], &actual[j]) {
            let _ = writeln!(out, "    {}", actual[j]);
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, "  - {}", expected[i]);
            i += 1;
        } else {
            let _ = writeln!(out, "  + {}", actual[j]);
            j += 1;
        }
    }
    out
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
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(
        failures[0].starts_with("docs/x.md:1: $ echo launchgate"),
        "{failures:?}"
    );
    assert!(
        failures[0].contains("  - launchgat\n  + launchgate"),
        "{failures:?}"
    );
    assert!(failures[1].contains("must say why"), "{failures:?}");
}
