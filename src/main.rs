use clap::Parser;
use std::process::ExitCode;

/// The process allocator (the binary's choice, not the library's). Every request builds and
/// drops a `serde_json::Value` tree of thousands of small nodes; with glibc malloc, allocation
/// was ~25% of the request path, and mimalloc cut the core's time per Pod CREATE by ~40%
/// (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = launchgate::cli::Cli::parse();
    match launchgate::cli::run(cli) {
        Ok(code) => code,
        // The reader of stdout went away (`| head`): the output it wanted was written.
        Err(e) if launchgate::cli::stdout_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("launchgate: {}", launchgate::cli::error_text(&e));
            ExitCode::from(2)
        }
    }
}
