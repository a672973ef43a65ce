//! Every page of the built documentation site reads at 1280 px without sideways scrolling: no
//! page wider than the window, no code block or table wider than its box (which would scroll it
//! on its own), and no code block wrapping a line (YAML and command output keep their
//! indentation). On a 390 px phone no page scrolls sideways and no table column is squeezed
//! narrower than a few characters (a key broken letter by letter). Checked in a real headless
//! Chromium through chromedriver, over the site `./scripts/docs.sh` builds into `target/book`
//! (each test builds it first).
//!
//! Like the playground's browser test, it needs Debian's `chromium` and `chromium-driver`, and
//! the site's builder (mdBook, which `scripts/docs.sh` installs into `target/tools`). Without
//! them it says so on one `SKIPPED` line of stderr and returns, unless
//! `LAUNCHGATE_BROWSER_REQUIRED=1` (CI), which makes them missing a failure.

mod common;

use common::browser::{self, in_headless_chromium};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The desktop window width a page must fit.
const WIDTH: u32 = 1280;

/// A phone's width.
const PHONE: u32 = 390;

/// The narrowest a table column may be on a phone, in CSS pixels (about ten characters of
/// code; the old style squeezed columns to 50-70 px, breaking keys every few letters).
const NARROWEST_COLUMN: u32 = 80;

/// Says why the test does not run, or fails when it must.
fn skip(why: &str) {
    browser::skip("the site's layout test", why);
}

/// The site's pages (the HTML of each page of the book; not the all-in-one print page).
fn pages(book: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "html")
                && !matches!(
                    path.file_name().and_then(|n| n.to_str()),
                    Some("print.html" | "toc.html" | "404.html")
                )
            {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(book, &mut out);
    out.sort();
    out
}

/// What scrolls sideways on the page: the page itself, or a block wider than its box.
const WIDE: &str = r#"
const wide = [];
const page = document.scrollingElement;
if (page.scrollWidth > page.clientWidth) {
  wide.push(`the page: ${page.scrollWidth} px wide in ${page.clientWidth} px`);
}
for (const el of document.querySelectorAll('main pre, main table, main .table-wrapper, main blockquote, main p, main ul, main ol')) {
  if (el.scrollWidth > el.clientWidth + 1) {
    wide.push(`${el.tagName.toLowerCase()} ${el.scrollWidth} px wide in ${el.clientWidth} px: ${el.textContent.trim().slice(0, 100)}`);
  }
}
for (const el of document.querySelectorAll('main pre > code')) {
  const ws = getComputedStyle(el).whiteSpace;
  if (ws !== 'pre') {
    wide.push(`a code block wraps its lines (white-space: ${ws}): ${el.textContent.trim().slice(0, 100)}`);
  }
}
return [window.innerWidth, wide];
"#;

/// On a phone: the page itself never scrolls sideways (a table or code block may, in its own
/// box), and no table cell with text is narrower than `NARROWEST` px.
const SQUEEZED: &str = r#"
const NARROWEST = arguments[0];
const found = [];
const page = document.scrollingElement;
if (page.scrollWidth > page.clientWidth) {
  found.push(`the page: ${page.scrollWidth} px wide in ${page.clientWidth} px`);
}
for (const el of document.querySelectorAll('main p, main ul, main ol, main blockquote')) {
  if (el.scrollWidth > el.clientWidth + 1) {
    found.push(`${el.tagName.toLowerCase()} ${el.scrollWidth} px wide in ${el.clientWidth} px: ${el.textContent.trim().slice(0, 100)}`);
  }
}
for (const cell of document.querySelectorAll('main td, main th')) {
  const text = cell.textContent.trim();
  if (text.length > 1 && cell.getBoundingClientRect().width < NARROWEST) {
    found.push(`a table cell ${Math.round(cell.getBoundingClientRect().width)} px wide: ${text.slice(0, 60)}`);
  }
}
return [window.innerWidth, found];
"#;

/// Builds the site once for both tests and returns its directory and pages, or `None` when the
/// test cannot run.
fn built_site() -> Option<(PathBuf, Vec<PathBuf>)> {
    static BUILT: std::sync::OnceLock<Option<(PathBuf, Vec<PathBuf>)>> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_site).clone()
}

fn build_site() -> Option<(PathBuf, Vec<PathBuf>)> {
    let root = common::root();
    let mdbook_installed = std::fs::read_dir(root.join("target/tools"))
        .map(|mut d| {
            d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("mdbook-")))
        })
        .unwrap_or(false);
    if !mdbook_installed && !browser::required() {
        skip("mdBook is not installed (`./scripts/docs.sh` installs it)");
        return None;
    }
    let status = Command::new(root.join("scripts/docs.sh"))
        .current_dir(&root)
        .stdout(Stdio::null())
        .status()
        .expect("running scripts/docs.sh");
    assert!(status.success(), "scripts/docs.sh failed to build the site");
    let book = root.join("target/book");
    let pages = pages(&book);
    assert!(pages.len() > 20, "the site has {} pages", pages.len());
    Some((book, pages))
}

#[tokio::test]
async fn no_page_of_the_site_scrolls_sideways_or_squeezes_a_table_on_a_phone() {
    let Some(browser) = browser::browser("the site's layout test") else {
        return;
    };
    let Some((book, pages)) = built_site() else {
        return;
    };
    let phone =
        serde_json::json!({"deviceMetrics": {"width": PHONE, "height": 844, "pixelRatio": 3.0}});
    in_headless_chromium!(browser, &["--hide-scrollbars"], phone, |driver| {
        let mut found = Vec::new();
        for page in &pages {
            driver
                .goto(format!("file://{}", page.display()))
                .await
                .unwrap();
            let ret = driver
                .execute(SQUEEZED, vec![serde_json::json!(NARROWEST_COLUMN)])
                .await
                .unwrap();
            let (inner, bad): (u32, Vec<String>) = ret.convert().unwrap();
            assert_eq!(inner, PHONE, "the window is not {PHONE} px wide");
            let name = page.strip_prefix(&book).unwrap().display().to_string();
            found.extend(bad.into_iter().map(|w| format!("{name}: {w}")));
        }
        assert!(
            found.is_empty(),
            "{} part(s) of the site do not read at {PHONE} px:\n{}",
            found.len(),
            found.join("\n")
        );
    });
}

#[tokio::test]
async fn no_page_of_the_site_scrolls_sideways_or_wraps_code_at_1280_px() {
    let Some(browser) = browser::browser("the site's layout test") else {
        return;
    };
    let Some((book, pages)) = built_site() else {
        return;
    };
    let window = format!("--window-size={WIDTH},900");
    in_headless_chromium!(browser, &["--hide-scrollbars", &window], |driver| {
        let mut wide = Vec::new();
        for page in &pages {
            driver
                .goto(format!("file://{}", page.display()))
                .await
                .unwrap();
            let ret = driver.execute(WIDE, Vec::new()).await.unwrap();
            let (inner, found): (u32, Vec<String>) = ret.convert().unwrap();
            assert_eq!(inner, WIDTH, "the window is not {WIDTH} px wide");
            let name = page.strip_prefix(&book).unwrap().display().to_string();
            wide.extend(found.into_iter().map(|w| format!("{name}: {w}")));
        }
        assert!(
            wide.is_empty(),
            "{} part(s) of the site scroll sideways at {WIDTH} px:\n{}",
            wide.len(),
            wide.join("\n")
        );
    });
}
