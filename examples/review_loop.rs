//! Runs the core on one AdmissionReview body over and over, for a profiler to watch:
//!
//! ```text
//! cargo build --profile bench --example review_loop
//! valgrind --tool=callgrind ./target/release/examples/review_loop \
//!     tests/fixtures/admission/create-vcjob-wandb-job-run42.json mutate 200
//! perf record -g ./target/release/examples/review_loop BODY mutate 200000
//! ```
//!
//! Arguments: the body (a file), the endpoint (`mutate` or `validate`, or `floor`: serde_json's
//! parse and serialise of the same body, what the benchmarks compare the core with), the number
//! of reviews. The policy is the embedded default; the allocator is the server's (mimalloc).

use launchgate::cluster::NoCluster;
use launchgate::{Endpoint, Policy, review};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: review_loop BODY mutate|validate|floor COUNT";
    let body = std::fs::read(args.next().ok_or_else(|| anyhow::anyhow!(usage))?)?;
    let endpoint = match args.next().as_deref() {
        Some("mutate") => Some(Endpoint::Mutate),
        Some("validate") => Some(Endpoint::Validate),
        Some("floor") => None,
        _ => anyhow::bail!(usage),
    };
    let count: usize = args.next().ok_or_else(|| anyhow::anyhow!(usage))?.parse()?;
    let Some(endpoint) = endpoint else {
        let mut bytes = 0;
        for _ in 0..count {
            let value: serde_json::Value = serde_json::from_slice(std::hint::black_box(&body))?;
            bytes += serde_json::to_vec(&value)?.len();
        }
        println!("{count} parses and serialisations, {bytes} bytes");
        return Ok(());
    };
    let policy = Policy::embedded_default();
    let mut bytes = 0;
    for _ in 0..count {
        let outcome = review(&policy, endpoint, std::hint::black_box(&body), &NoCluster)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        bytes += outcome.body.len();
    }
    println!("{count} reviews, {bytes} response bytes");
    Ok(())
}
