//! Bytes the core allocates per review, by object size: the memory side of `benches/core.rs`.
//!
//! A counting wrapper around the server's allocator (mimalloc) records, for one call of
//! `launchgate::review` on each case (after a warm-up call):
//!
//! * **allocated** — every byte requested during the call (churn: what the allocator hands out);
//! * **peak** — the most bytes live at once above what was live before the call: what a
//!   request in flight adds to the process's memory, and what the server's memory budget
//!   (`--memory-budget`) charges per body byte.
//!
//! Both are printed per case and as a multiple of the request body. Deterministic: no timing,
//! so one run is the measurement. `cargo bench --bench memory`.

#[path = "support/cases.rs"]
mod cases;

use launchgate::cluster::NoCluster;
use launchgate::{Endpoint, Policy, review};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl Counting {
    fn grew(size: usize) {
        ALLOCATED.fetch_add(size, Relaxed);
        ALLOCATIONS.fetch_add(1, Relaxed);
        let live = LIVE.fetch_add(size, Relaxed) + size;
        PEAK.fetch_max(live, Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to mimalloc; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::grew(layout.size());
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::grew(layout.size());
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Relaxed);
        Self::grew(new_size);
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What one call of `f` allocated: (bytes requested, allocations, peak live bytes above the
/// level before the call).
fn measure(f: impl FnOnce()) -> (usize, usize, usize) {
    let before = LIVE.load(Relaxed);
    PEAK.store(before, Relaxed);
    let (bytes0, count0) = (ALLOCATED.load(Relaxed), ALLOCATIONS.load(Relaxed));
    f();
    (
        ALLOCATED.load(Relaxed) - bytes0,
        ALLOCATIONS.load(Relaxed) - count0,
        PEAK.load(Relaxed).saturating_sub(before),
    )
}

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn main() {
    // `cargo bench` passes `--bench` (and maybe filters): case names containing a filter run.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let policy = Policy::embedded_default();
    println!(
        "| case | endpoint | body | allocated | ×body | peak live | ×body | allocations | charged | peak/charged |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for case in cases::cases() {
        if !filters.is_empty() && !filters.iter().any(|f| case.name.contains(f.as_str())) {
            continue;
        }
        for (endpoint, label) in [
            (Endpoint::Mutate, "mutate"),
            (Endpoint::Validate, "validate"),
        ] {
            let run = || {
                let out = review(&policy, endpoint, &case.body, &NoCluster).expect("review");
                std::hint::black_box(out);
            };
            run();
            let (bytes, count, peak) = measure(run);
            let body = case.body.len();
            let charged = launchgate::server::budget::review_cost(&case.body).charge;
            println!(
                "| {} | {label} | {} | {} | {:.1} | {} | {:.1} | {count} | {} | {:.2} |",
                case.name,
                human(body),
                human(bytes),
                bytes as f64 / body as f64,
                human(peak),
                peak as f64 / body as f64,
                human(charged as usize),
                peak as f64 / charged as f64,
            );
        }
    }
}
