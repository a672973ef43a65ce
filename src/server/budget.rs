//! The memory budget: how many bytes admission reviews may hold at once.
//!
//! What a review holds follows its body's **shape**, not its length: a launch Pod's core peak is
//! about 6.8× its body for a mutation and 4.7× for a validation, but the API server defaults
//! every container, and launchgate then writes into each, so a Pod of thousands of tiny
//! containers peaks at ~65× its body (`cargo bench --bench memory`). Counting requests
//! (`--max-concurrency`) cannot bound that. So each review is charged [`review_cost`] — the
//! larger of `body × COST_FACTOR` and an estimate from a one-pass scan of the body's values,
//! members, strings and containers (no allocation) — against a budget of bytes, and waits
//! (queued, FIFO) until its charge fits. A review whose shape alone needs more than the whole
//! budget is denied unreviewed with the reason (`too_dense`); one whose length-based charge is
//! larger runs alone. A review that cannot start within the request deadline is answered 503,
//! as when no processing slot frees up.
//!
//! The default budget comes from the container's memory limit (cgroup v2 `memory.max` or v1
//! `memory.limit_in_bytes`): half of what is left after [`RESERVED_BYTES`] for the process
//! itself (runtime, TLS, caches, the policy). `--memory-budget-mib` sets it explicitly.
//!
//! After a large review, memory goes back to the operating system: every runtime worker hands
//! its freed allocator pages back the next time it goes idle ([`on_worker_idle`]).

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};

/// Bytes charged per body byte: the core's measured peak for a mutation (6.8×), the body, the
/// response and HTTP/TLS buffers, with headroom for allocator fragmentation (a burst of 1.5 MiB
/// Pods under a 256 MiB container's budget peaks at 162–182 MiB, `tests/memory.rs`).
pub(crate) const COST_FACTOR: u64 = 16;

/// Bodies from this size on are charged by their shape ([`crate::json::shape`]); smaller ones
/// at [`SMALL_BODY_FACTOR`] per byte without a scan (the common launch Pod is ~7 KiB).
pub(crate) const SCAN_FROM_BYTES: usize = 16 << 10;

/// Bytes charged per body byte below [`SCAN_FROM_BYTES`]: more than the densest shape costs,
/// so a small review is never under-charged (16 KiB × 128 = 2 MiB at most).
pub(crate) const SMALL_BODY_FACTOR: u64 = 128;

/// Bytes charged per JSON value, object member, string byte and container of a review's body:
/// the parse (a value is 32 bytes, a member's map entry ~80), the mutation's writes (each
/// container gets its securityContext, mounts and env: ~9 KiB at the peak with the patch that
/// records them) and headroom for fragmentation. Measured with `cargo bench --bench memory`:
/// a defaulted Pod of 50k tiny containers peaks at 10.4 KiB per container (65× its body),
/// generated launch Pods at ~35 KiB per 5 KiB container; the charge is 1.3× and 1.6× that.
pub(crate) const PER_VALUE: u64 = 120;
pub(crate) const PER_MEMBER: u64 = 120;
pub(crate) const PER_STRING_BYTE: u64 = 2;
pub(crate) const PER_CONTAINER: u64 = 12 << 10;

/// Time charged per container of a review's body, in nanoseconds of one core. What a review
/// does follows its containers: each is mutated (security context, mounts, env), recorded in
/// the patch and checked against the queue's limits, linearly; an UPDATE judges its old object
/// too (comparing what was admitted, through one index), and the body holds both, so both
/// objects' containers are counted. Measured with the release build
/// on a loaded 2-core machine (`/mutate` through the server): Pods of 10,000–40,000 tiny
/// containers take 40–65 µs per container, defaulted ones (`cargo bench` `pod-dense-*`) ~65
/// µs; the charge is about 3× that, for a slower or throttled core and other reviews running
/// meanwhile. The rest of a body (values, members, strings) is parsed and written at tens of
/// nanoseconds each, which the 8 MiB body limit keeps well under the deadline.
pub(crate) const NANOS_PER_CONTAINER: u64 = 200_000;

/// What reviewing a body costs in memory, estimated before it is parsed. The default costs
/// nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReviewCost {
    /// Bytes charged against the budget: the larger of `body × COST_FACTOR` and the shape's
    /// estimate (`body × SMALL_BODY_FACTOR` for a small body).
    pub charge: u64,
    /// The shape's estimate alone (0 for a small body, which is never scanned).
    pub by_shape: u64,
    /// Containers counted in the body (0 for a small body).
    pub containers: u64,
    /// JSON values counted in the body (0 for a small body).
    pub values: u64,
    /// The time reviewing it may take, in nanoseconds of one core: [`NANOS_PER_CONTAINER`]
    /// per container (0 for a small body).
    pub time_nanos: u64,
}

impl ReviewCost {
    /// The cost of reviewing both (several objects judged by one request).
    pub fn plus(self, other: ReviewCost) -> ReviewCost {
        ReviewCost {
            charge: self.charge.saturating_add(other.charge),
            by_shape: self.by_shape.saturating_add(other.by_shape),
            containers: self.containers.saturating_add(other.containers),
            values: self.values.saturating_add(other.values),
            time_nanos: self.time_nanos.saturating_add(other.time_nanos),
        }
    }

    /// This cost for work `factor` times as heavy per container (memory and time), e.g. the
    /// playground's judging, which renders and diffs what it reviews.
    pub fn times(self, factor: u64) -> ReviewCost {
        ReviewCost {
            charge: self.charge.saturating_mul(factor),
            by_shape: self.by_shape.saturating_mul(factor),
            time_nanos: self.time_nanos.saturating_mul(factor),
            ..self
        }
    }

    /// The time reviewing it may take, estimated from its containers (zero for a small body,
    /// which is never scanned: it holds too few containers to matter).
    pub fn review_time(&self) -> Duration {
        Duration::from_nanos(self.time_nanos)
    }

    /// Why a review of this cost is refused unreviewed when it may take at most `allowed`
    /// (its shape alone needs longer), said the same by every server.
    pub fn too_slow_reason(&self, allowed: Duration) -> String {
        format!(
            "the object is too large to review in time: {} containers take up to {} ms, more than the {} ms launchgate allows a review (half its request deadline)",
            self.containers,
            self.review_time().as_millis(),
            allowed.as_millis()
        )
    }

    /// Why a review of this cost is refused unreviewed under a budget of `budget_bytes`
    /// (its shape alone needs more than the whole budget), said the same by every server.
    pub fn too_dense_reason(&self, budget_bytes: u64) -> String {
        let mib = |bytes: u64| bytes.div_ceil(1 << 20);
        format!(
            "the object is too large to review: {} containers and {} JSON values need about {} MiB, more than launchgate's memory budget of {} MiB",
            self.containers,
            self.values,
            mib(self.by_shape),
            mib(budget_bytes)
        )
    }
}

/// The [`ReviewCost`] of a review's body: one pass over the bytes, no allocation.
pub fn review_cost(body: &[u8]) -> ReviewCost {
    if body.len() < SCAN_FROM_BYTES {
        return ReviewCost {
            charge: body.len() as u64 * SMALL_BODY_FACTOR,
            ..ReviewCost::default()
        };
    }
    let s = crate::json::shape(body);
    let by_shape = s.values * PER_VALUE
        + s.members * PER_MEMBER
        + s.string_bytes * PER_STRING_BYTE
        + s.containers * PER_CONTAINER;
    ReviewCost {
        charge: (body.len() as u64 * COST_FACTOR).max(by_shape),
        by_shape,
        containers: s.containers,
        values: s.values,
        time_nanos: s.containers.saturating_mul(NANOS_PER_CONTAINER),
    }
}

/// Memory kept outside the budget for the process itself.
pub(crate) const RESERVED_BYTES: u64 = 48 << 20;

/// Budget when no container memory limit is found.
pub(crate) const UNLIMITED_DEFAULT_BYTES: u64 = 512 << 20;

/// A review whose charge is at least this large makes the workers give memory back afterwards.
const RELEASE_AFTER_BYTES: u64 = 8 << 20;

/// The share of a request deadline a review itself may take: the rest is for reading the body,
/// waiting for memory and a slot, and answering, so the answer comes well before the deadline.
pub fn review_time_allowed(request_deadline: Duration) -> Duration {
    request_deadline / 2
}

/// Why a review is not run.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its shape alone needs more than the whole budget: refused unreviewed, never queued.
    TooDense(ReviewCost),
    /// Its shape alone needs longer than the review may take (`.1`): refused unreviewed.
    TooSlow(ReviewCost, Duration),
    /// Its charge did not fit in time, or the server is stopping.
    Budget(BudgetError),
}

/// Why a review could not be charged (or get a processing slot).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BudgetError {
    /// The charge did not fit within the wait allowed.
    Deadline,
    /// The server is stopping.
    Closed,
}

/// The budget and its gauges.
pub(crate) struct MemoryBudget {
    permits: Semaphore,
    total_kib: u32,
    in_flight: Gauge,
    queued: Gauge,
    peak: Gauge,
    budget: Gauge,
}

impl MemoryBudget {
    /// A budget of `bytes` (at least 1 MiB).
    pub(crate) fn new(bytes: u64) -> Self {
        let total_kib = (bytes / 1024).clamp(1024, u32::MAX as u64 / 2) as u32;
        let budget = Gauge::default();
        budget.set(total_kib as i64 * 1024);
        MemoryBudget {
            permits: Semaphore::new(total_kib as usize),
            total_kib,
            in_flight: Gauge::default(),
            queued: Gauge::default(),
            peak: Gauge::default(),
            budget,
        }
    }

    /// The budget from the container's memory limit, or the default when there is none.
    pub(crate) fn from_environment() -> Self {
        Self::new(default_budget(cgroup_memory_limit()))
    }

    /// The budget in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.total_kib as u64 * 1024
    }

    /// Adds the gauges to the server's registry.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "memory_budget_bytes",
            "Bytes admission reviews may hold at once (each charged by its body's size and shape)",
            self.budget.clone(),
        );
        registry.register(
            "memory_in_flight_bytes",
            "Bytes charged to the reviews running now",
            self.in_flight.clone(),
        );
        registry.register(
            "memory_in_flight_peak_bytes",
            "Most bytes charged at once since the start",
            self.peak.clone(),
        );
        registry.register(
            "memory_queued_requests",
            "Reviews waiting for their charge to fit in the memory budget",
            self.queued.clone(),
        );
    }

    /// A charge of `bytes` in KiB (never more than the whole budget, so one review whose
    /// length-based charge is larger runs alone instead of never; one whose *shape* does not
    /// fit is refused before, see [`ReviewCost::by_shape`]).
    fn cost_kib(&self, bytes: u64) -> u32 {
        (bytes.div_ceil(1024).max(1)).min(self.total_kib as u64) as u32
    }

    /// The one gate a review passes before it runs: one whose shape alone needs more than the
    /// whole budget is refused ([`Refusal::TooDense`]), one whose shape alone needs longer than
    /// `time_allowed` ([`review_time_allowed`]) too ([`Refusal::TooSlow`]); any other waits (at
    /// most `wait`) until its charge fits ([`MemoryBudget::charge`]).
    pub(crate) async fn admit(
        &self,
        cost: ReviewCost,
        time_allowed: Duration,
        wait: Duration,
    ) -> Result<Charge<'_>, Refusal> {
        if cost.by_shape > self.bytes() {
            return Err(Refusal::TooDense(cost));
        }
        if cost.review_time() > time_allowed {
            return Err(Refusal::TooSlow(cost, time_allowed));
        }
        self.charge(cost.charge, wait)
            .await
            .map_err(Refusal::Budget)
    }

    /// Waits (at most `wait`) until a review charged `bytes` ([`review_cost`]) fits, and
    /// charges it until the returned [`Charge`] is dropped.
    pub(crate) async fn charge(
        &self,
        bytes: u64,
        wait: Duration,
    ) -> Result<Charge<'_>, BudgetError> {
        let kib = self.cost_kib(bytes);
        self.queued.inc();
        let acquired = tokio::time::timeout(wait, self.permits.acquire_many(kib)).await;
        self.queued.dec();
        let permit = match acquired {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(BudgetError::Closed),
            Err(_) => return Err(BudgetError::Deadline),
        };
        let bytes = kib as i64 * 1024;
        let now = self.in_flight.inc_by(bytes) + bytes;
        if now > self.peak.get() {
            self.peak.set(now);
        }
        Ok(Charge {
            budget: self,
            bytes,
            _permit: permit,
        })
    }
}

/// Processing slots: how many requests are worked on at once (`serve --max-concurrency`; the
/// playground's few), each waited for within what is left of the request's deadline.
pub(crate) struct Slots(Semaphore);

impl Slots {
    /// `n` slots (at least one).
    pub(crate) fn new(n: usize) -> Self {
        Slots(Semaphore::new(n.max(1)))
    }

    /// Waits (at most `wait`) for a slot, held until the permit is dropped.
    pub(crate) async fn take(&self, wait: Duration) -> Result<SemaphorePermit<'_>, BudgetError> {
        match tokio::time::timeout(wait, self.0.acquire()).await {
            Ok(Ok(slot)) => Ok(slot),
            Ok(Err(_)) => Err(BudgetError::Closed),
            Err(_) => Err(BudgetError::Deadline),
        }
    }
}

/// A review's share of the budget, returned on drop.
pub(crate) struct Charge<'a> {
    budget: &'a MemoryBudget,
    bytes: i64,
    _permit: SemaphorePermit<'a>,
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        let left = self.budget.in_flight.dec_by(self.bytes) - self.bytes;
        if self.bytes as u64 >= RELEASE_AFTER_BYTES && left == 0 {
            // Nothing large is running any more: ask every worker to give memory back.
            RELEASE_EPOCH.fetch_add(1, Relaxed);
            release_thread_memory();
        }
    }
}

/// Budget for a container memory limit: half of what is left after [`RESERVED_BYTES`].
pub fn default_budget(limit: Option<u64>) -> u64 {
    match limit {
        Some(limit) => (limit.saturating_sub(RESERVED_BYTES) / 2).max(1 << 20),
        None => UNLIMITED_DEFAULT_BYTES,
    }
}

/// The memory limit of this process's cgroup (v2, then v1), if it has one.
pub(crate) fn cgroup_memory_limit() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    if let Some(v2) = read("/sys/fs/cgroup/memory.max") {
        return parse_limit(&v2);
    }
    read("/sys/fs/cgroup/memory/memory.limit_in_bytes").and_then(|v1| parse_limit(&v1))
}

/// A cgroup limit file's value: `max` (v2) or a page-rounded `i64::MAX` (v1) mean none.
fn parse_limit(text: &str) -> Option<u64> {
    let value: u64 = text.trim().parse().ok()?;
    (value < (1 << 60)).then_some(value)
}

static RELEASE_EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static RELEASED_EPOCH: Cell<u64> = const { Cell::new(0) };
}

/// For the runtime's `on_thread_park`: when a large review has finished since this worker last
/// looked, give this thread's freed allocator memory back to the operating system (once).
pub(crate) fn on_worker_idle() {
    let epoch = RELEASE_EPOCH.load(Relaxed);
    if RELEASED_EPOCH.with(|seen| seen.replace(epoch)) != epoch {
        release_thread_memory();
    }
}

/// Returns this thread's free mimalloc pages to the OS (a no-op for memory of another
/// allocator: mimalloc then holds nothing).
pub(crate) fn release_thread_memory() {
    // SAFETY: mi_collect only walks and frees mimalloc's own bookkeeping for this thread; it
    // takes no pointers from us and is safe to call at any time from any thread.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_budget_is_half_of_the_limit_after_the_reserve() {
        assert_eq!(default_budget(Some(256 << 20)), 104 << 20);
        assert_eq!(default_budget(None), UNLIMITED_DEFAULT_BYTES);
        // A tiny limit still lets one review run at a time.
        assert_eq!(default_budget(Some(16 << 20)), 1 << 20);
    }

    #[test]
    fn cgroup_limit_files() {
        assert_eq!(parse_limit("268435456\n"), Some(256 << 20));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit(""), None);
    }

    #[test]
    fn a_charge_is_capped_at_the_budget() {
        let b = MemoryBudget::new(100 << 20);
        assert_eq!(b.cost_kib(16 << 10), 16);
        assert_eq!(b.cost_kib(0), 1);
        assert_eq!(b.cost_kib(500 << 20), 100 * 1024);
    }

    #[test]
    fn the_cost_follows_the_shape_not_the_length() {
        let fixture = |name: &str| {
            std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/admission")
                    .join(name),
            )
            .unwrap()
        };
        // A small body is charged by its length at the densest shape's rate.
        let small = fixture("create-pod-launch-acme-mnist-mzxkz.json");
        assert_eq!(
            review_cost(&small).charge,
            small.len() as u64 * SMALL_BODY_FACTOR
        );
        // Two bodies of the same length: sparse (long strings) and dense (tiny containers).
        let container = r#"{"name":"c","image":"busybox","resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"Always"}"#;
        let n = 2000;
        let dense = format!(
            r#"{{"request":{{"object":{{"spec":{{"containers":[{}]}}}}}}}}"#,
            vec![container; n].join(",")
        );
        let sparse = format!(
            r#"{{"request":{{"object":{{"spec":{{"containers":[{{"name":"c","image":"{}"}}]}}}}}}}}"#,
            "x".repeat(dense.len() - 70)
        );
        let (dense, sparse) = (
            review_cost(dense.as_bytes()),
            review_cost(sparse.as_bytes()),
        );
        assert_eq!(dense.containers, n as u64);
        assert!(dense.by_shape >= n as u64 * PER_CONTAINER, "{dense:?}");
        assert!(dense.charge > 4 * sparse.charge, "{dense:?} {sparse:?}");
        assert_eq!(sparse.charge, sparse.charge.max(sparse.by_shape));
    }

    #[tokio::test]
    async fn reviews_queue_until_their_charge_fits_and_time_out_at_the_deadline() {
        // The budget holds one and a half charges.
        let cost = 1600 * 1024;
        let b = MemoryBudget::new(cost as u64 * 3 / 2);
        let first = b
            .charge(cost as u64, Duration::from_millis(10))
            .await
            .unwrap();
        assert_eq!(b.in_flight.get(), cost);
        assert_eq!(
            b.charge(cost as u64, Duration::from_millis(20)).await.err(),
            Some(BudgetError::Deadline)
        );
        assert_eq!(b.queued.get(), 0);
        drop(first);
        assert_eq!(b.in_flight.get(), 0);
        let second = b.charge(cost as u64, Duration::from_millis(10)).await;
        assert!(second.is_ok());
        assert_eq!(b.peak.get(), cost);
    }

    #[tokio::test]
    async fn a_charge_larger_than_the_budget_runs_alone() {
        let b = MemoryBudget::new(2 << 20);
        let huge = b.charge(10 << 20, Duration::from_millis(10)).await.unwrap();
        assert_eq!(b.in_flight.get(), 2 << 20);
        assert!(b.charge(1, Duration::from_millis(10)).await.is_err());
        drop(huge);
        assert!(b.charge(1, Duration::from_millis(10)).await.is_ok());
    }

    #[tokio::test]
    async fn a_review_whose_shape_exceeds_the_budget_is_refused_not_queued() {
        let b = MemoryBudget::new(4 << 20);
        let dense = ReviewCost {
            charge: 5 << 20,
            by_shape: 5 << 20,
            containers: 400,
            values: 4000,
            time_nanos: 0,
        };
        match b
            .admit(dense, Duration::MAX, Duration::from_millis(10))
            .await
        {
            Err(Refusal::TooDense(cost)) => assert_eq!(cost, dense),
            _ => panic!("a review denser than the budget was admitted"),
        }
        assert_eq!(b.in_flight.get(), 0);
        assert_eq!(
            dense.too_dense_reason(b.bytes()),
            "the object is too large to review: 400 containers and 4000 JSON values need about 5 MiB, more than launchgate's memory budget of 4 MiB"
        );
        // Two reviews of 3 MiB each: the second waits for the first and gets no charge in time.
        let fits = ReviewCost {
            charge: 3 << 20,
            by_shape: 3 << 20,
            ..dense
        };
        let first = b
            .admit(fits, Duration::MAX, Duration::from_millis(10))
            .await;
        assert!(first.is_ok());
        assert_eq!(
            b.admit(fits, Duration::MAX, Duration::from_millis(10))
                .await
                .err(),
            Some(Refusal::Budget(BudgetError::Deadline))
        );
        drop(first);
        assert!(
            b.admit(fits, Duration::MAX, Duration::from_millis(10))
                .await
                .is_ok()
        );
        // Both charged together are more than the budget holds.
        assert_eq!(fits.plus(fits).charge, 6 << 20);
    }

    #[tokio::test]
    async fn a_review_whose_shape_needs_longer_than_the_deadline_allows_is_refused() {
        let allowed = review_time_allowed(Duration::from_secs(4));
        assert_eq!(allowed, Duration::from_secs(2));
        let b = MemoryBudget::new(512 << 20);
        let pod_of = |containers: usize, image: &str| {
            format!(
                r#"{{"request":{{"object":{{"spec":{{"containers":[{}]}}}}}}}}"#,
                (0..containers)
                    .map(|i| format!(r#"{{"name":"c{i}","image":"{image}"}}"#))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        let pod = |containers: usize| pod_of(containers, "x");
        // 40,000 tiny containers: within the 512 MiB budget, not within the time.
        let wide = review_cost(pod(40_000).as_bytes());
        assert_eq!(wide.containers, 40_000);
        assert!(wide.by_shape < b.bytes(), "{wide:?}");
        assert!(wide.review_time() > allowed, "{:?}", wide.review_time());
        match b.admit(wide, allowed, Duration::from_millis(10)).await {
            Err(Refusal::TooSlow(cost, at)) => assert_eq!((cost, at), (wide, allowed)),
            _ => panic!("a review longer than the deadline allows was admitted"),
        }
        assert_eq!(b.in_flight.get(), 0);
        let reason = wide.too_slow_reason(allowed);
        assert_eq!(
            reason,
            "the object is too large to review in time: 40000 containers take up to 8000 ms, more than the 2000 ms launchgate allows a review (half its request deadline)"
        );
        // 200 containers, and a small body (never scanned), are reviewed.
        let usual =
            review_cost(pod_of(200, &"registry.example.com/train:v1 ".repeat(4)).as_bytes());
        assert_eq!(usual.containers, 200);
        assert!(
            usual.review_time() < allowed / 10,
            "{:?}",
            usual.review_time()
        );
        assert!(
            b.admit(usual, allowed, Duration::from_millis(10))
                .await
                .is_ok()
        );
        let small = review_cost(pod(3).as_bytes());
        assert_eq!(small.review_time(), Duration::ZERO);
        // The estimate is linear in the containers: twice the containers, twice the time.
        let half = review_cost(pod(20_000).as_bytes()).review_time();
        assert_eq!(half * 2, wide.review_time());
    }

    #[test]
    fn an_updates_estimate_counts_the_old_object_it_also_judges() {
        // An UPDATE judges the object and the old object (what was admitted carries its
        // violations): both objects' containers are charged, in time and in memory.
        let containers = |n: usize| {
            (0..n)
                .map(|i| format!(r#"{{"name":"c{i}","image":"x"}}"#))
                .collect::<Vec<_>>()
                .join(",")
        };
        let n = 4_900;
        let create = format!(
            r#"{{"request":{{"operation":"CREATE","object":{{"spec":{{"containers":[{}]}}}}}}}}"#,
            containers(n)
        );
        let update = format!(
            r#"{{"request":{{"operation":"UPDATE","object":{{"spec":{{"containers":[{c}]}}}},"oldObject":{{"spec":{{"containers":[{c}]}}}}}}}}"#,
            c = containers(n)
        );
        let (create, update) = (
            review_cost(create.as_bytes()),
            review_cost(update.as_bytes()),
        );
        assert_eq!(create.containers, n as u64);
        assert_eq!(update.containers, 2 * n as u64);
        assert_eq!(update.review_time(), create.review_time() * 2);
        // 4,900 containers on each side: 1.96 s of one core, within the 2.5 s a 5 s deadline
        // allows a review.
        assert!(update.review_time() <= review_time_allowed(Duration::from_secs(5)));
    }

    #[tokio::test]
    async fn a_slot_is_waited_for_within_the_deadline() {
        let slots = Slots::new(1);
        let held = slots.take(Duration::from_millis(10)).await.unwrap();
        assert_eq!(
            slots.take(Duration::from_millis(10)).await.err(),
            Some(BudgetError::Deadline)
        );
        drop(held);
        assert!(slots.take(Duration::from_millis(10)).await.is_ok());
    }

    #[test]
    fn each_worker_releases_once_per_large_review() {
        let before = RELEASE_EPOCH.load(Relaxed);
        on_worker_idle();
        assert_eq!(RELEASED_EPOCH.with(Cell::get), before);
        RELEASE_EPOCH.fetch_add(1, Relaxed);
        on_worker_idle();
        assert_eq!(RELEASED_EPOCH.with(Cell::get), before + 1);
    }
}
