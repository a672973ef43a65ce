//! The `launchgate` binary as a user runs it.

use std::process::{Command, Output, Stdio};

/// The built `launchgate`, run from the repository root (relative paths name repository files).
pub fn launchgate_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_launchgate"));
    cmd.current_dir(super::root());
    cmd
}

/// Runs `launchgate ARGS` from the repository root; its output captured.
pub fn launchgate(args: &[&str]) -> Output {
    launchgate_command()
        .args(args)
        .output()
        .expect("launchgate runs")
}

/// `launchgate check-config` on a file holding `config`.
pub fn check_config(config: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).unwrap();
    launchgate(&["check-config", path.to_str().unwrap()])
}

/// Runs `cmd` with `input` on its standard input; its output captured.
pub fn run_with_stdin(cmd: &mut Command, input: &[u8]) -> Output {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("input written");
    child.wait_with_output().expect("the command ends")
}

/// A command's output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
