//! The documentation's pages as the tests read them: their fenced blocks with the
//! `<!-- docs-test: … -->` marker above each, a console block's commands and the output it
//! shows, and how output is compared with a page (`...` any lines, `[..]` any text). The docs
//! test (tests/docs_commands.rs) runs the commands it can; the e2e tests that cover the rest
//! read their blocks here.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;

/// A fenced block of a Markdown page.
#[derive(Debug)]
pub struct Block {
    /// The line of its opening fence (1-based).
    pub line: usize,
    /// The first word of the fence's info string (`console`, `yaml`…).
    pub lang: String,
    /// Its lines.
    pub body: Vec<String>,
    /// The `<!-- docs-test: … -->` marker right before it, if any.
    pub marker: Option<String>,
}

/// The fenced blocks of a page, with the marker comment above each.
pub fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    // The comment lines right before a fence: its marker is the `docs-test` one among them
    // (another may name the block for a test that reads it).
    let mut comments: Vec<&str> = Vec::new();
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim_start();
        let fence = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        let Some(fence) = fence else {
            let text = line.trim();
            if text.starts_with("<!--") && text.ends_with("-->") {
                comments.push(text);
            } else if !text.is_empty() {
                comments.clear();
            }
            continue;
        };
        let indent = line.len() - trimmed.len();
        let lang = trimmed[fence.len()..]
            .split([',', ' '])
            .next()
            .unwrap_or("")
            .to_owned();
        let marker = comments
            .iter()
            .find_map(|p| p.strip_prefix("<!-- docs-test:"))
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
        comments.clear();
    }
    out
}

/// A command of a console block and the output the page shows for it.
#[derive(Debug, PartialEq)]
pub struct Step {
    pub command: String,
    pub expected: Vec<String>,
}

impl Step {
    /// The output the page shows, without an `[exit N]` line, and the exit code it shows (0
    /// without one).
    pub fn shown(&self) -> (&[String], i32) {
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
pub fn steps(body: &[String]) -> Vec<Step> {
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
pub fn line_matches(expected: &str, actual: &str) -> bool {
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
pub fn output_matches(expected: &[String], actual: &[String]) -> bool {
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

/// A line diff, page first: `-` page only, `+` output only, ` ` both.
pub fn diff(expected: &[String], actual: &[String]) -> String {
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

/// The blocks of a page (a path relative to the repository) whose `docs-test` marker is
/// `marker`, in page order.
pub fn marked_blocks(page: &str, marker: &str) -> Vec<Block> {
    let text =
        std::fs::read_to_string(super::root().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
    let found: Vec<Block> = blocks(&text)
        .into_iter()
        .filter(|b| b.marker.as_deref() == Some(marker))
        .collect();
    assert!(!found.is_empty(), "{page}: no block marked `{marker}`");
    found
}

/// Makes `dir` (emptied first) a reader's working directory: a link to each of the
/// repository's top-level files and directories, so commands read the repository's files, and
/// the files they write beside them stay in `dir`.
pub fn reader_dir(dir: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    for entry in std::fs::read_dir(super::root())? {
        let entry = entry?;
        std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name()))?;
    }
    Ok(())
}

/// `PATH` with this build's `launchgate` first, as a page's commands run.
pub fn path_with_launchgate() -> OsString {
    let bin = Path::new(env!("CARGO_BIN_EXE_launchgate"));
    let dir = bin
        .parent()
        .expect("the binary is in a directory")
        .to_path_buf();
    std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH")
}
