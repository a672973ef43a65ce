use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = launchgate::cli::Cli::parse();
    match launchgate::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("launchgate: {e:#}");
            ExitCode::from(2)
        }
    }
}
