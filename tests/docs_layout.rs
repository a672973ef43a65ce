//! Every page of the built documentation site reads at 1280 px without sideways scrolling: no
//! page wider than the window, and no code block or table wider than its box (which would
//! scroll it on its own). Checked in a real headless Chromium through chromedriver, over the
//! site `./scripts/docs.sh` builds into `target/book` (this test builds it first).
//!
//! Like the playground's browser test, it needs Debian's `chromium` and `chromium-driver`, and
//! the site's builder (mdBook, which `scripts/docs.sh` installs into `target/tools`). Without
//! them it says so on one `SKIPPED` line of stderr and returns, unless
//! `LAUNCHGATE_BROWSER_REQUIRED=1` (CI), which makes them missing a failure.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The window width a page must fit.
const WIDTH: u32 = 1280;

/// chromedriver, with the browsers it starts (its process group), killed when dropped.
struct Driver {
    child: Child,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // SAFETY: kill(2) with the negated id of the process group this test created.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

fn required() -> bool {
    std::env::var("LAUNCHGATE_BROWSER_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Says why the test does not run, or fails when it must.
fn skip(why: &str) {
    assert!(!required(), "LAUNCHGATE_BROWSER_REQUIRED is set and {why}");
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: the site's layout test: {why}; LAUNCHGATE_BROWSER_REQUIRED=1 makes this a failure"
    );
}

/// chromedriver on an ephemeral loopback port, leading its own process group, and its URL.
fn chromedriver(path: &Path) -> (Driver, String) {
    let mut command = Command::new(path);
    command
        .args(["--port=0", "--allowed-ips=127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("starting chromedriver");
    let stdout = child.stdout.take().expect("piped");
    let driver = Driver { child };
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.expect("reading chromedriver's output");
        if line.contains("started successfully on port") {
            let port: u16 = line
                .trim_end_matches('.')
                .rsplit(' ')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("no port in {line:?}"));
            std::thread::spawn(move || for _ in lines {});
            return (driver, format!("http://127.0.0.1:{port}"));
        }
    }
    panic!("chromedriver ended without saying its port");
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
return [window.innerWidth, wide];
"#;

#[tokio::test]
async fn no_page_of_the_site_scrolls_sideways_at_1280_px() {
    use thirtyfour::prelude::*;
    let (Some(chromium), Some(driver_path)) = (
        on_path("chromium").or_else(|| on_path("chromium-browser")),
        on_path("chromedriver"),
    ) else {
        return skip(
            "chromium or chromedriver is missing (`apt-get install -y chromium chromium-driver`)",
        );
    };
    let root = common::root();
    let mdbook_installed = std::fs::read_dir(root.join("target/tools"))
        .map(|mut d| {
            d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("mdbook-")))
        })
        .unwrap_or(false);
    if !mdbook_installed && !required() {
        return skip("mdBook is not installed (`./scripts/docs.sh` installs it)");
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

    let profile = tempfile::tempdir().unwrap();
    let (_driver, url) = chromedriver(&driver_path);
    let mut caps = DesiredCapabilities::chrome();
    caps.set_binary(chromium.to_str().unwrap()).unwrap();
    for arg in [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--disable-crash-reporter",
        "--hide-scrollbars",
        &format!("--window-size={WIDTH},900"),
    ] {
        caps.add_arg(arg).unwrap();
    }
    caps.add_arg(&format!("--user-data-dir={}", profile.path().display()))
        .unwrap();
    let driver = WebDriver::new(url, caps).await.unwrap();
    let outcome = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
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
    }))
    .await;
    let quit = driver.quit().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    quit.unwrap();
}
