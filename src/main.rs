use clap::Parser;
use std::process::ExitCode;

/// The process allocator (the binary's choice, not the library's). Every request builds and
/// drops a `serde_json::Value` tree of thousands of small nodes; with glibc malloc, allocation
/// was ~25% of the request path, and mimalloc cut the core's time per Pod CREATE by ~40%
/// (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc commits each arena it reserves up front on Linux and marks it for transparent huge
/// pages, so every thread's first touch of its heap made 2 MiB resident at once: 8 MiB of an
/// idle server's 9 MiB of heap, and more under load. Committed as used, the heap becomes
/// resident 4 KiB at a time (the idle server: 2.4 MiB; docs/performance.md).
///
/// mimalloc reserves its first arena in its own start-up constructor (priority 101), before
/// `main`, so the option's default is set by a constructor that runs just before it (and
/// allocates nothing). A `MIMALLOC_ARENA_EAGER_COMMIT` in the environment still decides:
/// mimalloc reads it over the default.
#[cfg(target_os = "linux")]
extern "C" fn allocator_settings() {
    /// `mi_option_arena_eager_commit` in mimalloc's `mimalloc.h` (the crate names no constant).
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    // SAFETY: writes one entry of mimalloc's static option table, which needs no
    // initialisation; nothing else runs yet.
    unsafe { libmimalloc_sys::mi_option_set_default(ARENA_EAGER_COMMIT, 0) };
}

/// Runs [`allocator_settings`] among the process's constructors, before mimalloc's (101).
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array.00100")]
static ALLOCATOR_SETTINGS: extern "C" fn() = allocator_settings;

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
