//! In-process cost of the core entry point against the `serde_json` floor.
//!
//! For every case the suite measures, in the same run:
//!
//! * `floor/<case>`  — `serde_json::from_slice::<Value>(body)` + `serde_json::to_vec(&value)`:
//!   the least any webhook that reads and writes JSON can do with this body;
//! * `review/<case>` — `launchgate::review(policy, Endpoint::Mutate, body, &NoCluster)`:
//!   request bytes in, AdmissionReview response bytes out, policy already loaded;
//! * `validate/<case>` — the same on the validating endpoint.
//!
//! Cases: the recorded fixtures (small Pod, Job, Volcano Job, UPDATE with oldObject), a
//! generated ~1 MiB Pod with 200 containers, the size curve 1/10/100/1000 containers
//! (every generated container ~5 KiB, all generated Pods carry `wandb.ai/monitor: "true"`), and
//! the UPDATE of a Pod of 1,000 and 4,900 containers that each break the queue's limits as
//! they did when it was admitted (`update-violating-*`: both objects judged, every violation
//! compared with the old object's).
//!
//! After criterion has run, a summary table is printed with the floor, the core and their
//! ratio per case, from an interleaved timing loop of its own (median of batches), so the
//! report always holds the floor and the ratio side by side. `cargo bench --bench core --
//! --quick` or `BENCH_QUICK=1` shortens the run.

/// The server's allocator (set in `src/main.rs`), so the bench measures what production runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/cases.rs"]
mod cases;

use cases::{Case, cases};
use criterion::{BenchmarkId, Criterion, Throughput};
use launchgate::cluster::NoCluster;
use launchgate::{Endpoint, Policy, review};
use serde_json::Value;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn floor(body: &[u8]) -> Vec<u8> {
    let v: Value = serde_json::from_slice(body).unwrap();
    serde_json::to_vec(&v).unwrap()
}

fn core(policy: &Policy, endpoint: Endpoint, body: &[u8]) -> Vec<u8> {
    review(policy, endpoint, body, &NoCluster).unwrap().body
}

fn quick() -> bool {
    std::env::var_os("BENCH_QUICK").is_some() || std::env::args().any(|a| a == "--quick")
}

fn criterion_suite(c: &mut Criterion, policy: &Policy, cases: &[Case]) {
    let (measure, warm) = if quick() {
        (Duration::from_millis(500), Duration::from_millis(200))
    } else {
        (Duration::from_secs(2), Duration::from_millis(500))
    };
    for case in cases {
        let mut g = c.benchmark_group(&case.name);
        g.measurement_time(measure)
            .warm_up_time(warm)
            .sample_size(if case.body.len() > 2 << 20 { 10 } else { 30 })
            .throughput(Throughput::Bytes(case.body.len() as u64));
        g.bench_function(BenchmarkId::from_parameter("floor"), |b| {
            b.iter(|| floor(black_box(&case.body)))
        });
        g.bench_function(BenchmarkId::from_parameter("review-mutate"), |b| {
            b.iter(|| core(policy, Endpoint::Mutate, black_box(&case.body)))
        });
        g.bench_function(BenchmarkId::from_parameter("review-validate"), |b| {
            b.iter(|| core(policy, Endpoint::Validate, black_box(&case.body)))
        });
        g.finish();
    }
}

/// Median time per call of `f`, measured in batches interleaved with the other functions.
fn interleaved(budget: Duration, fs: &mut [&mut dyn FnMut()]) -> Vec<Duration> {
    // Calibrate a batch size so one batch of the slowest function takes ~5 ms.
    let mut per_call = Vec::new();
    for f in fs.iter_mut() {
        f();
        let t = Instant::now();
        f();
        per_call.push(t.elapsed().max(Duration::from_nanos(50)));
    }
    let slowest = per_call.iter().max().copied().unwrap();
    let batch = ((Duration::from_millis(5).as_nanos() / slowest.as_nanos()) as usize).max(1);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); fs.len()];
    let started = Instant::now();
    while started.elapsed() < budget || samples[0].len() < 5 {
        for (i, f) in fs.iter_mut().enumerate() {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            samples[i].push(t.elapsed().as_nanos() as f64 / batch as f64);
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            Duration::from_nanos(s[s.len() / 2] as u64)
        })
        .collect()
}

fn fmt_dur(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

fn summary(policy: &Policy, cases: &[Case]) {
    let budget = if quick() {
        Duration::from_millis(300)
    } else {
        Duration::from_millis(1500)
    };
    println!();
    println!(
        "launchgate core vs serde_json floor (median of interleaved batches; ratio = core / floor)"
    );
    println!(
        "| case | body | floor (parse+serialise) | review mutate | ratio | review validate | ratio | mutate MB/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for case in cases {
        let body = &case.body;
        let t = interleaved(
            budget,
            &mut [
                &mut || {
                    black_box(floor(black_box(body)));
                },
                &mut || {
                    black_box(core(policy, Endpoint::Mutate, black_box(body)));
                },
                &mut || {
                    black_box(core(policy, Endpoint::Validate, black_box(body)));
                },
            ],
        );
        let ratio = |d: Duration| d.as_secs_f64() / t[0].as_secs_f64();
        let size = if body.len() >= 1 << 20 {
            format!("{:.2} MiB", body.len() as f64 / (1 << 20) as f64)
        } else {
            format!("{:.1} KiB", body.len() as f64 / 1024.0)
        };
        println!(
            "| {} | {} | {} | {} | {:.2}× | {} | {:.2}× | {:.0} |",
            case.name,
            size,
            fmt_dur(t[0]),
            fmt_dur(t[1]),
            ratio(t[1]),
            fmt_dur(t[2]),
            ratio(t[2]),
            body.len() as f64 / t[1].as_secs_f64() / 1e6,
        );
    }
    println!();
}

fn main() {
    let policy = Policy::embedded_default();
    let cases = cases();
    // Sanity: every case is a valid request whose answer is an allowed AdmissionReview.
    for case in &cases {
        let out: Value =
            serde_json::from_slice(&core(&policy, Endpoint::Mutate, &case.body)).unwrap();
        assert_eq!(out["kind"], "AdmissionReview", "{}", case.name);
    }
    let mut c = Criterion::default().configure_from_args();
    criterion_suite(&mut c, &policy, &cases);
    c.final_summary();
    // `cargo bench -- --list` and `--profile-time` runs skip the table.
    // Only `cargo bench` passes `--bench`; `cargo test --benches` runs each benchmark once.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench")
        || args
            .iter()
            .any(|a| a == "--list" || a == "--test" || a == "--profile-time")
    {
        return;
    }
    // A criterion filter (`cargo bench --bench core -- 'pod-small|job'`) also filters the table.
    const VALUE_FLAGS: &[&str] = &[
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--plotting-backend",
        "--output-format",
        "--color",
        "--format",
    ];
    let mut filters = Vec::new();
    let mut skip_next = false;
    for a in &args {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        if VALUE_FLAGS.contains(&a.as_str()) {
            skip_next = true;
        } else if !a.starts_with('-') {
            // Criterion's filter is a regex; alternatives (`a|b`) are what the table honours.
            for alt in a.split('|') {
                filters.push(alt.split('/').next().unwrap_or(alt).to_string());
            }
        }
    }
    let selected: Vec<Case> = cases
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f.as_str())))
        .collect();
    summary(&policy, &selected);
}
