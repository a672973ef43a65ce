//! Why an admission request is answered with an HTTP error instead of an AdmissionReview.

use super::MAX_BODY_BYTES;
use crate::review::RequestError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// A request to `/mutate` or `/validate` that gets no AdmissionReview. Each kind knows its HTTP
/// status and its `reason` label in `launchgate_admission_request_errors_total`; its message
/// (the `Display` text) is what the client reads in `{"error": "...", "code": N}`.
///
/// The reason labels are a contract: the PrometheusRule alerts, the dashboard and
/// docs/operations.md select on them.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AdmissionError {
    /// The body did not arrive within the read timeout (408, `read_timeout`).
    #[error("request body not received within {0:?}")]
    ReadTimeout(Duration),
    /// The body is larger than [`MAX_BODY_BYTES`], declared or sent (413, `too_large`).
    #[error("request body exceeds {MAX_BODY_BYTES} bytes")]
    TooLarge,
    /// The body could not be read: the client reset the stream or sent bad framing (400,
    /// `read`).
    #[error("reading body: {0}")]
    Read(String),
    /// The content type is not `application/json`; holds the one sent (415, `content_type`).
    #[error("content type must be application/json, got {0:?}")]
    ContentType(String),
    /// The body is not a usable AdmissionReview: malformed JSON, another kind or version, no
    /// `request`, no uid (400, `bad_request`).
    #[error(transparent)]
    BadRequest(#[from] RequestError),
    /// The memory budget had no room for the review within the request deadline (503,
    /// `memory_budget`).
    #[error(
        "the memory budget had no room for this {body_bytes}-byte review within the {deadline:?} request deadline"
    )]
    MemoryBudget {
        /// Size of the request body.
        body_bytes: usize,
        /// The request deadline.
        deadline: Duration,
    },
    /// No processing slot freed up within the request deadline (503, `deadline`).
    #[error("no processing slot within the {0:?} request deadline (server overloaded)")]
    Deadline(Duration),
    /// The review panicked: a bug in launchgate (500, `internal`).
    #[error("internal error while reviewing the request (a bug in launchgate; it was logged)")]
    Internal,
    /// The server is stopping (503); not a request error, so neither counted nor logged.
    #[error("server is stopping")]
    Stopping,
}

impl AdmissionError {
    /// The HTTP status of the answer.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            AdmissionError::ReadTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            AdmissionError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            AdmissionError::Read(_) | AdmissionError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdmissionError::ContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AdmissionError::MemoryBudget { .. }
            | AdmissionError::Deadline(_)
            | AdmissionError::Stopping => StatusCode::SERVICE_UNAVAILABLE,
            AdmissionError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `reason` label of `launchgate_admission_request_errors_total`; `None` for what is
    /// not counted (the server stopping).
    /// Every [`AdmissionError::reason`]: each is counted from 0 at start-up, so an alert on its
    /// first occurrence (`increase(...) > 0`) fires.
    pub(crate) const REASONS: [&'static str; 10] = [
        "too_dense",
        "too_slow",
        "read_timeout",
        "too_large",
        "read",
        "content_type",
        "bad_request",
        "memory_budget",
        "deadline",
        "internal",
    ];

    pub(crate) fn reason(&self) -> Option<&'static str> {
        Some(match self {
            AdmissionError::ReadTimeout(_) => "read_timeout",
            AdmissionError::TooLarge => "too_large",
            AdmissionError::Read(_) => "read",
            AdmissionError::ContentType(_) => "content_type",
            AdmissionError::BadRequest(_) => "bad_request",
            AdmissionError::MemoryBudget { .. } => "memory_budget",
            AdmissionError::Deadline(_) => "deadline",
            AdmissionError::Internal => "internal",
            AdmissionError::Stopping => return None,
        })
    }
}

impl IntoResponse for AdmissionError {
    fn into_response(self) -> Response {
        json_error(self.status(), self.to_string())
    }
}

/// An HTTP error as launchgate answers every one: `{"error": message, "code": status}`.
pub(crate) fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({"error": message.into(), "code": status.as_u16()});
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    #[test]
    fn each_error_has_its_status_and_the_documented_reason_label() {
        let ms = Duration::from_millis;
        let cases = [
            (
                AdmissionError::ReadTimeout(ms(3000)),
                408,
                Some("read_timeout"),
            ),
            (AdmissionError::TooLarge, 413, Some("too_large")),
            (AdmissionError::Read("reset".into()), 400, Some("read")),
            (
                AdmissionError::ContentType("text/plain".into()),
                415,
                Some("content_type"),
            ),
            (
                AdmissionError::BadRequest(RequestError("request.uid is empty".into())),
                400,
                Some("bad_request"),
            ),
            (
                AdmissionError::MemoryBudget {
                    body_bytes: 10,
                    deadline: ms(4000),
                },
                503,
                Some("memory_budget"),
            ),
            (AdmissionError::Deadline(ms(4000)), 503, Some("deadline")),
            (AdmissionError::Internal, 500, Some("internal")),
            (AdmissionError::Stopping, 503, None),
        ];
        for (error, status, reason) in cases {
            assert_eq!(error.status().as_u16(), status, "{error:?}");
            assert_eq!(error.reason(), reason, "{error:?}");
        }
    }

    #[test]
    fn messages_name_the_limit_that_was_hit() {
        assert_eq!(
            AdmissionError::ReadTimeout(Duration::from_millis(3000)).to_string(),
            "request body not received within 3s"
        );
        assert_eq!(
            AdmissionError::TooLarge.to_string(),
            "request body exceeds 8388608 bytes"
        );
        assert_eq!(
            AdmissionError::ContentType("text/plain".into()).to_string(),
            r#"content type must be application/json, got "text/plain""#
        );
        assert_eq!(
            AdmissionError::MemoryBudget {
                body_bytes: 1024,
                deadline: Duration::from_millis(4000)
            }
            .to_string(),
            "the memory budget had no room for this 1024-byte review within the 4s request deadline"
        );
        assert_eq!(
            AdmissionError::Deadline(Duration::from_millis(50)).to_string(),
            "no processing slot within the 50ms request deadline (server overloaded)"
        );
        // The core's message as it is, without a prefix.
        assert_eq!(
            AdmissionError::from(RequestError("AdmissionReview has no request".into())).to_string(),
            "AdmissionReview has no request"
        );
    }

    #[tokio::test]
    async fn the_answer_is_a_json_error_with_the_status_as_code() {
        let response = AdmissionError::TooLarge.into_response();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"error": "request body exceeds 8388608 bytes", "code": 413})
        );
    }
}
