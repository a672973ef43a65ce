//! Child processes that die with the test, and a real headless Chromium driven through
//! chromedriver: the playground's page and the documentation site are looked at in one.
//!
//! The browser needs Debian's `chromium` and `chromium-driver`. Without them a test says so on
//! one `SKIPPED` line of stderr and returns, unless `LAUNCHGATE_BROWSER_REQUIRED=1` (CI), which
//! makes them missing a failure.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A child process killed (with its process group, when it leads one) when dropped.
pub struct Guard {
    pub child: Child,
    group: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.group {
            // chromedriver and the browsers it started share its process group.
            // SAFETY: kill(2) with the negated group id of a group this test created.
            unsafe {
                libc::kill(-(self.child.id() as i32), libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `command` started with `PR_SET_PDEATHSIG = SIGKILL` (a test binary killed outright leaves
/// it not behind), optionally leading its own process group, its stdout piped.
pub fn spawn(command: &mut Command, group: bool) -> Guard {
    command.stdout(Stdio::piped()).stderr(Stdio::inherit());
    if group {
        command.process_group(0);
    }
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    Guard { child, group }
}

/// Reads the child's stdout until a line containing `marker`, returning that line.
pub fn line_with(guard: &mut Guard, marker: &str) -> String {
    let stdout = guard.child.stdout.take().expect("stdout is piped");
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.expect("reading the child's stdout");
        if line.contains(marker) {
            // Keep draining so the child never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            return line;
        }
    }
    panic!("the child's stdout ended without a line containing {marker:?}");
}

/// Where a program is on PATH.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// Whether `LAUNCHGATE_BROWSER_REQUIRED` makes a missing browser (or site builder) a failure.
pub fn required() -> bool {
    std::env::var("LAUNCHGATE_BROWSER_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Says on one `SKIPPED` line of stderr why `test` does not run, or fails when it must.
pub fn skip(test: &str, why: &str) {
    assert!(!required(), "LAUNCHGATE_BROWSER_REQUIRED is set and {why}");
    // Straight to the process's stderr: the test harness captures `eprintln!`.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: {why}; LAUNCHGATE_BROWSER_REQUIRED=1 makes this a failure"
    );
}

/// Chromium and chromedriver, or `None` (skipping `test`) when either is missing.
pub fn browser(test: &str) -> Option<(PathBuf, PathBuf)> {
    match (
        on_path("chromium").or_else(|| on_path("chromium-browser")),
        on_path("chromedriver"),
    ) {
        (Some(chromium), Some(driver)) => Some((chromium, driver)),
        _ => {
            skip(
                test,
                "chromium or chromedriver is missing (`apt-get install -y chromium chromium-driver`)",
            );
            None
        }
    }
}

/// chromedriver on an ephemeral loopback port, in its own process group (the browsers it
/// starts die with it), and its URL.
pub fn chromedriver(path: &Path) -> (Guard, String) {
    let mut guard = spawn(
        Command::new(path).args(["--port=0", "--allowed-ips=127.0.0.1"]),
        true,
    );
    let line = line_with(&mut guard, "started successfully on port");
    let port: u16 = line
        .trim_end_matches('.')
        .rsplit(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (guard, format!("http://127.0.0.1:{port}"))
}

/// The flags every headless Chromium of the tests gets: no sandbox, GPU, first-run or
/// background traffic, no crash reporting.
pub const CHROMIUM_ARGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-crash-reporter",
    "--disable-breakpad",
];

/// `in_headless_chromium!(browser, args, |driver| session)`: runs `session` (a block that may
/// `.await`, with `driver` a `&thirtyfour::WebDriver`) in a fresh headless Chromium, `browser`
/// being [`browser`]'s pair, with its own profile and `args` besides [`CHROMIUM_ARGS`], driven
/// through [`chromedriver`]. The session always ends with an orderly quit (the browser
/// closes), also when an assertion in it fails; the guards then kill whatever is left.
///
/// A macro, so that only the tests that drive a browser link thirtyfour (its `impl Add<Key>
/// for String` would make `String + &String` ambiguous in every other test).
#[allow(unused_macros)]
macro_rules! in_headless_chromium {
    ($browser:expr, $args:expr, |$driver:ident| $session:block) => {{
        $crate::common::browser::in_headless_chromium!(
            $browser,
            $args,
            serde_json::Value::Null,
            |$driver| $session
        )
    }};
    // `$emulation`: Chromium's `mobileEmulation` option (a phone's viewport, which a window
    // cannot be: a headless window is never narrower than 500 px), or null for none.
    ($browser:expr, $args:expr, $emulation:expr, |$driver:ident| $session:block) => {{
        use thirtyfour::ChromiumLikeCapabilities as _;
                let (chromium, chromedriver_path): (std::path::PathBuf, std::path::PathBuf) = $browser;
        let profile = tempfile::tempdir().unwrap();
        let (_driver_guard, url) = $crate::common::browser::chromedriver(&chromedriver_path);
        let mut caps = thirtyfour::DesiredCapabilities::chrome();
        caps.set_binary(chromium.to_str().unwrap()).unwrap();
        let args: &[&str] = $args;
        for arg in $crate::common::browser::CHROMIUM_ARGS.iter().chain(args) {
            caps.add_arg(arg).unwrap();
        }
        caps.add_arg(&format!("--user-data-dir={}", profile.path().display()))
            .unwrap();
        let emulation: serde_json::Value = $emulation;
        if !emulation.is_null() {
            caps.add_experimental_option("mobileEmulation", emulation)
                .unwrap();
        }
        let driver = thirtyfour::WebDriver::new(url, caps).await.unwrap();
        let outcome = {
            let $driver = &driver;
            futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async $session))
                .await
        };
        let quit = driver.quit().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
        quit.unwrap();
    }};
}
#[allow(unused_imports)]
pub(crate) use in_headless_chromium;
