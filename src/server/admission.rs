//! The admission endpoints, `POST /mutate` and `POST /validate`, written as the flow of one
//! request: read the body (bounded in size and time) → check that it is JSON → charge the
//! memory budget → take a processing slot → review → answer, log and count.
//!
//! Every way a request can fail is an [`AdmissionError`], which knows its HTTP status and its
//! metric label; [`reject`] answers, counts and logs it. A panic is caught by tower-http's
//! `CatchPanicLayer` around the handler ([`route`]).

use super::error::AdmissionError;
use super::otel::RequestTrace;
use super::{AppState, MAX_BODY_BYTES, budget, decision};
use crate::review::{self, Endpoint, Outcome, ReviewOutcome};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, post};
use prometheus_client::metrics::gauge::Gauge;
use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::SemaphorePermit;
use tower_http::catch_panic::{CatchPanicLayer, ResponseForPanic};

/// The log target of the request lines (`rejected request`, the `BUG:` line): the server
/// module's, where they have always come from, so log filters and queries keep matching.
const LOG_TARGET: &str = "launchgate::server";

/// Bodies from this size on are reviewed with `block_in_place` (see [`run_review`]).
const LARGE_BODY_BYTES: usize = 512 * 1024;

/// A body over the limit is still read to its end (discarding it), up to this many bytes, so
/// the client gets the readable 413: answering while the client is still sending makes
/// HTTP/2 reset the stream and HTTP/1.1 close the connection under the client's feet, and the
/// client then sees a reset instead of the answer.
const DRAIN_LIMIT_BYTES: u64 = 4 * MAX_BODY_BYTES as u64;

/// The route of one admission endpoint. A panic while answering (the core is fuzzed and must
/// never panic, but should a bug slip through) becomes that request's 500 through tower-http's
/// `CatchPanicLayer` and [`AnswerPanic`]: the API server gets an answer and applies the
/// webhook's failurePolicy, and the server keeps serving.
pub(super) fn route(state: &Arc<AppState>, endpoint: Endpoint) -> MethodRouter<Arc<AppState>> {
    post(
        move |State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body| {
            admission(state, endpoint, headers, body)
        },
    )
    .layer(CatchPanicLayer::custom(AnswerPanic {
        state: state.clone(),
        endpoint,
    }))
}

/// Answers one admission request on `endpoint`.
async fn admission(
    state: Arc<AppState>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    // With trace export off, this `None` is all tracing costs a request.
    let mut trace = state
        .tracer
        .as_ref()
        .map(|tracer| RequestTrace::start(tracer, &headers, started));
    let answered: Result<Answer, AdmissionError> = async {
        let body = read_body(body, &headers, state.read_timeout).await?;
        // Checked after the body is read (within the size and time limits): answering before
        // the body is consumed makes HTTP/2 reset the stream, and clients then lose the
        // readable error.
        require_json(&headers)?;
        if let Some(trace) = trace.as_mut() {
            trace.mark("wait");
        }
        // What the review will hold in memory follows the body's shape, not its length: one
        // that could never fit the budget is denied unreviewed.
        let cost = budget::review_cost(&body);
        // Memory first (a large review waits until its share fits), then a processing slot;
        // both within the request deadline.
        // Nor one whose shape alone would keep a core busy past the deadline: its answer would
        // come after the API server gave up, and later reviews would wait behind it.
        let time_allowed = budget::review_time_allowed(state.request_deadline);
        let admitted = state
            .budget
            .admit(cost, time_allowed, time_left(&state, started))
            .await;
        let _charge = match admitted {
            Ok(charge) => charge,
            Err(budget::Refusal::TooDense(cost)) => {
                let why = Unreviewable::TooDense(state.budget.bytes());
                return deny_unreviewed(&state, endpoint, &body, cost, why);
            }
            Err(budget::Refusal::TooSlow(cost, allowed)) => {
                let why = Unreviewable::TooSlow(allowed);
                return deny_unreviewed(&state, endpoint, &body, cost, why);
            }
            Err(budget::Refusal::Budget(budget::BudgetError::Closed)) => {
                return Err(AdmissionError::Stopping);
            }
            Err(budget::Refusal::Budget(budget::BudgetError::Deadline)) => {
                return Err(AdmissionError::MemoryBudget {
                    body_bytes: body.len(),
                    deadline: state.request_deadline,
                });
            }
        };
        let _slot = processing_slot(&state, started).await?;
        let observer: &mut dyn review::Observer = match trace.as_mut() {
            Some(trace) => trace,
            None => &mut (),
        };
        Ok(Answer::Reviewed(run_review(
            &state, endpoint, &body, observer,
        )?))
    }
    .await;
    match answered {
        Ok(Answer::Reviewed(outcome)) => {
            let elapsed = started.elapsed();
            if let Some(trace) = trace {
                trace.reviewed(endpoint, &outcome.summary);
            }
            answer(&state, endpoint, outcome, elapsed)
        }
        Ok(Answer::Unreviewed(reason, response)) => {
            if let Some(trace) = trace {
                trace.unreviewed(endpoint, reason, response.status().as_u16());
            }
            response
        }
        Err(error) => {
            if let Some(trace) = trace {
                let reason = error.reason().unwrap_or("stopping");
                trace.unreviewed(endpoint, reason, error.status().as_u16());
            }
            reject(&state, endpoint, error)
        }
    }
}

/// How a request that did not fail is answered.
#[allow(
    clippy::large_enum_variant,
    reason = "one value on the stack per request, moved once; boxing would allocate"
)]
enum Answer {
    /// From the core's review.
    Reviewed(ReviewOutcome),
    /// Without a review (an object too large to review), with the metric's reason.
    Unreviewed(&'static str, Response),
}

/// Why an object is denied without a review.
#[derive(Debug, Clone, Copy)]
enum Unreviewable {
    /// Its shape needs more memory than the whole budget (bytes).
    TooDense(u64),
    /// Its shape needs longer than a review may take.
    TooSlow(Duration),
}

impl Unreviewable {
    /// The metric's and the log's reason: `too_dense`, `too_slow`.
    fn reason(self) -> &'static str {
        match self {
            Unreviewable::TooDense(_) => "too_dense",
            Unreviewable::TooSlow(_) => "too_slow",
        }
    }

    /// The rule of the denial.
    fn rule(self) -> &'static crate::rules::Rule {
        match self {
            Unreviewable::TooDense(_) => crate::rules::SERVER_TOO_DENSE,
            Unreviewable::TooSlow(_) => crate::rules::SERVER_TOO_SLOW,
        }
    }

    /// The denial's message.
    fn message(self, cost: &budget::ReviewCost) -> String {
        match self {
            Unreviewable::TooDense(budget_bytes) => format!(
                "launchgate: {}; it is denied unreviewed (split the workload, or raise the webhook's memory limit)",
                cost.too_dense_reason(budget_bytes)
            ),
            Unreviewable::TooSlow(allowed) => format!(
                "launchgate: {}; it is denied unreviewed (split the workload)",
                cost.too_slow_reason(allowed)
            ),
        }
    }
}

/// Denies, without reviewing it, a request whose object would need more memory than the whole
/// budget or longer than a review may take (tens of thousands of containers): answering it
/// would take the replica down or come after the API server gave up, and admitting it
/// unreviewed would let a workload skip every rule. Only the request's `uid` is read (the rest
/// of the body is skipped, nothing is built). Counted and logged as `too_dense` or `too_slow`;
/// a body without a readable `uid` is a bad request.
fn deny_unreviewed(
    state: &AppState,
    endpoint: Endpoint,
    body: &[u8],
    cost: budget::ReviewCost,
    why: Unreviewable,
) -> Result<Answer, AdmissionError> {
    #[derive(serde::Deserialize)]
    struct Review {
        request: Request,
    }
    #[derive(serde::Deserialize)]
    struct Request {
        uid: String,
    }
    let uid = serde_json::from_slice::<Review>(body)
        .map_err(|e| {
            AdmissionError::BadRequest(crate::review::RequestError(format!(
                "not an AdmissionReview: {e}"
            )))
        })?
        .request
        .uid;
    let message = why.message(&cost);
    let reason = why.reason();
    state.metrics.count_error(endpoint, reason);
    // Its rule, counted with no queue: the object was never read far enough to resolve one.
    decision::count_violation(
        &state.metrics.decisions,
        "",
        &crate::rules::Violation::new(why.rule(), message.clone()),
    );
    tracing::info!(
        target: LOG_TARGET,
        endpoint = endpoint.as_str(),
        reason,
        uid = uid.as_str(),
        containers = cost.containers,
        values = cost.values,
        estimate_bytes = cost.by_shape,
        budget_bytes = state.budget.bytes(),
        estimate_ms = cost.review_time().as_millis() as u64,
        "denied unreviewed"
    );
    let body = crate::admission::review_response_body(&crate::admission::AdmissionResponse::deny(
        &uid, message,
    ));
    let response = (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    Ok(Answer::Unreviewed(reason, response))
}

/// What is left of the request deadline.
fn time_left(state: &AppState, started: Instant) -> Duration {
    state.request_deadline.saturating_sub(started.elapsed())
}

/// Reads the body within `timeout`, up to [`MAX_BODY_BYTES`].
///
/// Not tower-http's `RequestBodyLimitLayer` and `RequestBodyTimeoutLayer`, whose behaviour
/// differs from what clients rely on here: the limit layer answers a body whose declared
/// length is too large before reading it (the client then sees a reset, not the 413, see
/// [`DRAIN_LIMIT_BYTES`]) and with a plain-text answer; the timeout layer bounds the wait for
/// each chunk, not the whole body, so a client trickling a byte at a time would never time out.
async fn read_body(
    body: Body,
    headers: &HeaderMap,
    timeout: Duration,
) -> Result<Bytes, AdmissionError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    tokio::time::timeout(timeout, read_limited(body, MAX_BODY_BYTES, declared))
        .await
        .map_err(|_| AdmissionError::ReadTimeout(timeout))?
}

/// Reads the body, up to `limit` bytes; a larger one (declared or sent) is drained and
/// answered [`AdmissionError::TooLarge`]. The caller bounds the time.
async fn read_limited(
    mut body: Body,
    limit: usize,
    declared: Option<u64>,
) -> Result<Bytes, AdmissionError> {
    use http_body_util::BodyExt as _;
    let mut over = declared.is_some_and(|n| n > limit as u64);
    if declared.is_some_and(|n| n > DRAIN_LIMIT_BYTES) {
        return Err(AdmissionError::TooLarge);
    }
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| AdmissionError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len() as u64;
        if total > limit as u64 {
            over = true;
            chunks.clear();
        }
        if over {
            if total > DRAIN_LIMIT_BYTES {
                break;
            }
            continue;
        }
        chunks.push(data);
    }
    if over {
        return Err(AdmissionError::TooLarge);
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().expect("one chunk"),
        _ => {
            let mut all = Vec::with_capacity(total as usize);
            for c in &chunks {
                all.extend_from_slice(c);
            }
            all.into()
        }
    })
}

/// The request must say its body is JSON (`application/json`, any parameters).
fn require_json(headers: &HeaderMap) -> Result<(), AdmissionError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let json = content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if json {
        Ok(())
    } else {
        Err(AdmissionError::ContentType(content_type.to_string()))
    }
}

/// Waits, within what is left of the request deadline, for one of the `--max-concurrency`
/// processing slots.
///
/// Not tower's `ConcurrencyLimitLayer`: it would take the slot before the body is read (a slow
/// client would hold one while it sends) and waits for it without a bound (tower's `Timeout`
/// does not cover that wait), where a request must get its 503 by the deadline.
async fn processing_slot(
    state: &AppState,
    started: Instant,
) -> Result<SemaphorePermit<'_>, AdmissionError> {
    state
        .slots
        .take(time_left(state, started))
        .await
        .map_err(|e| match e {
            budget::BudgetError::Closed => AdmissionError::Stopping,
            budget::BudgetError::Deadline => AdmissionError::Deadline(state.request_deadline),
        })
}

/// Runs the core on `body` with the policy in force, counted in `launchgate_admission_in_flight`.
/// A panic unwinds out of it to [`AnswerPanic`].
fn run_review(
    state: &AppState,
    endpoint: Endpoint,
    body: &[u8],
    observer: &mut dyn review::Observer,
) -> Result<ReviewOutcome, AdmissionError> {
    let _in_flight = InFlight::enter(&state.metrics.in_flight);
    let policy = state.policy.load();
    let mut review =
        move || review::review_observed(&policy, endpoint, body, state.cluster.as_ref(), observer);
    // A large object keeps the core busy for milliseconds; hand this worker's other tasks to
    // another thread meanwhile so they are not stuck behind it. Small requests (the usual
    // case, tens of microseconds) run inline.
    let outcome = if body.len() >= LARGE_BODY_BYTES
        && tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(|| {
            let outcome = review();
            // This thread may not run as a worker again soon (block_in_place handed its
            // worker role on), so its idle hook would not give the review's memory back.
            budget::release_thread_memory();
            outcome
        })
    } else {
        review()
    };
    Ok(outcome?)
}

/// Answers a request whose handler panicked: logged as a bug, counted `internal`, a 500.
/// The request's slot, memory charge and in-flight count are released as the panic unwinds.
#[derive(Clone)]
struct AnswerPanic {
    state: Arc<AppState>,
    endpoint: Endpoint,
}

impl ResponseForPanic for AnswerPanic {
    type ResponseBody = Body;

    fn response_for_panic(&mut self, _panic: Box<dyn Any + Send + 'static>) -> Response {
        tracing::error!(
            target: LOG_TARGET,
            endpoint = self.endpoint.as_str(),
            "BUG: the admission core panicked on a request; answered 500"
        );
        reject(&self.state, self.endpoint, AdmissionError::Internal)
    }
}

/// `launchgate_admission_in_flight` is one higher while this lives.
struct InFlight<'a>(&'a Gauge);

impl<'a> InFlight<'a> {
    fn enter(gauge: &'a Gauge) -> Self {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The AdmissionReview answer: the request is counted, its decision logged and counted, and a
/// denial or warning becomes an Event (with `--events`).
fn answer(
    state: &AppState,
    endpoint: Endpoint,
    outcome: ReviewOutcome,
    elapsed: Duration,
) -> Response {
    let s = &outcome.summary;
    state.metrics.count_review(endpoint, s, elapsed);
    decision::count_decision(&state.metrics.decisions, endpoint, s);
    decision::log_decision(endpoint, s, elapsed);
    if let Some(recorder) = &state.events
        && s.outcome != Outcome::Skipped
    {
        recorder.record(s);
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        outcome.body,
    )
        .into_response()
}

/// Answers `error` as JSON; a request error (anything but the server stopping) is counted under
/// its reason and logged.
pub(super) fn reject(state: &AppState, endpoint: Endpoint, error: AdmissionError) -> Response {
    if let Some(reason) = error.reason() {
        state.metrics.count_error(endpoint, reason);
        tracing::info!(
            target: LOG_TARGET,
            endpoint = endpoint.as_str(),
            reason,
            message = error.to_string().as_str(),
            "rejected request"
        );
    }
    error.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(chunks: Vec<Vec<u8>>) -> Body {
        let stream = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
        );
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn chunks_within_the_limit_are_joined() {
        let read = read_limited(body(vec![b"{\"a\":".to_vec(), b"1}".to_vec()]), 16, None)
            .await
            .unwrap();
        assert_eq!(&read[..], b"{\"a\":1}");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_too_large_whether_declared_or_sent() {
        let sent = read_limited(body(vec![vec![b' '; 10], vec![b' '; 10]]), 16, None).await;
        assert!(matches!(sent, Err(AdmissionError::TooLarge)), "{sent:?}");
        let declared = read_limited(body(vec![vec![b' '; 4]]), 16, Some(17)).await;
        assert!(
            matches!(declared, Err(AdmissionError::TooLarge)),
            "{declared:?}"
        );
    }

    #[tokio::test]
    async fn a_broken_body_is_a_read_error() {
        let broken = Body::from_stream(futures_util::stream::iter([
            Ok(Bytes::from_static(b"{")),
            Err(std::io::Error::other("connection reset")),
        ]));
        let read = read_limited(broken, 16, None).await;
        assert!(
            matches!(&read, Err(AdmissionError::Read(m)) if m.contains("connection reset")),
            "{read:?}"
        );
    }

    #[test]
    fn only_json_content_types_are_accepted() {
        let with = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, ct.parse().unwrap());
            require_json(&h)
        };
        assert!(with("application/json").is_ok());
        assert!(with("Application/JSON; charset=utf-8").is_ok());
        assert!(matches!(
            with("text/plain"),
            Err(AdmissionError::ContentType(t)) if t == "text/plain"
        ));
        assert!(matches!(
            require_json(&HeaderMap::new()),
            Err(AdmissionError::ContentType(t)) if t.is_empty()
        ));
    }
}
