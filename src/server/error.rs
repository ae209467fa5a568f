//! OpenAI-style error responses: `{"error": {"message", "type", "param", "code"}}` with
//! the matching HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::engine::EngineError;
use crate::backend::Fault;
use crate::model::ModelError;

/// An error a request ends with, rendered as OpenAI renders its errors.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// OpenAI's `type`: `invalid_request_error`, `rate_limit_error`, `server_error`.
    pub kind: &'static str,
    /// Machine-readable code (`model_not_found`, `context_length_exceeded`, …).
    pub code: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// What went wrong, for a person.
    pub message: String,
    /// Seconds for a `Retry-After` header (429, and 503 where waiting may help).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A 400 `invalid_request_error`.
    pub fn invalid(code: &'static str, param: Option<&str>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code,
            param: param.map(str::to_string),
            message: message.into(),
            retry_after: None,
        }
    }

    /// A 400 for a request field that holds a value of the wrong JSON type.
    pub fn wrong_type(param: &str, expected: &str) -> Self {
        ApiError::invalid(
            "invalid_type",
            Some(param),
            format!("Invalid type for '{param}': expected {expected}."),
        )
    }

    /// A 400 for a request field whose value is out of range or not supported.
    pub fn bad_value(param: &str, message: impl Into<String>) -> Self {
        ApiError::invalid("invalid_value", Some(param), message)
    }

    /// A 400 for a required field that is absent.
    pub fn missing(param: &str) -> Self {
        ApiError::invalid(
            "missing_required_parameter",
            Some(param),
            format!("Missing required parameter: '{param}'."),
        )
    }

    /// A 404 for a model this server does not serve.
    pub fn unknown_model(asked: &str, served: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "model_not_found",
            param: Some("model".into()),
            message: format!("The model '{asked}' does not exist; this server serves '{served}'."),
            ..ApiError::invalid("", None, "")
        }
    }

    /// A 401: the request lacks the server's API key or gives another.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "invalid_api_key",
            message: message.into(),
            ..ApiError::invalid("", None, "")
        }
    }

    /// A 404 for a path that has no endpoint.
    pub fn no_route(path: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: format!("There is no endpoint at {path}."),
            ..ApiError::invalid("", None, "")
        }
    }

    /// A 413 for a body over the limit.
    pub fn too_large(limit: usize) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "request_too_large",
            message: format!("The request body is larger than the limit of {limit} bytes."),
            ..ApiError::invalid("", None, "")
        }
    }

    /// A 429: the wait queue is full.
    pub fn queue_full(max_queue: usize) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            code: "queue_full",
            param: None,
            message: format!(
                "The server is busy: {max_queue} requests are already waiting. Retry later."
            ),
            retry_after: Some(1),
        }
    }

    /// A 503: the server is shutting down and takes no more work.
    pub fn shutting_down() -> Self {
        ApiError::server(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "The server is shutting down.",
        )
    }

    /// A 503 for a step the device could not run: out of memory or at a limit (retry
    /// later, when other requests have ended), or lost.
    pub fn device(error: &ModelError) -> Self {
        let (code, retry_after) = match error.fault() {
            Some(Fault::OutOfMemory) => ("device_out_of_memory", Some(1)),
            Some(Fault::Limit) => ("device_limit", Some(1)),
            _ => ("device_lost", None),
        };
        ApiError {
            retry_after,
            ..ApiError::server(StatusCode::SERVICE_UNAVAILABLE, code, error.to_string())
        }
    }

    /// A 5xx `server_error`.
    pub fn server(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind: "server_error",
            code,
            param: None,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A 500 `internal_error`: a failure of the server itself, not of the request.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::server(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }

    /// The JSON body, also sent as an SSE event when a stream fails midway.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<ModelError> for ApiError {
    /// The request's fault (an empty prompt, past the context, bad sampler settings)
    /// is a 400; a device that is out of memory or at a limit, or lost where failover
    /// could not act (the fallback's own), a 503 ([`ModelError::fault`]); ours
    /// ([`ModelError::is_internal`]) a 500 `internal_error`; anything else (the model
    /// file, the machine) a 500 `generation_failed`.
    fn from(error: ModelError) -> Self {
        match error {
            e @ ModelError::ContextFull { .. } => {
                ApiError::invalid("context_length_exceeded", None, e.to_string())
            }
            ModelError::Input(message) => ApiError::invalid("invalid_value", None, message),
            e if e.is_input() => ApiError::invalid("invalid_value", None, e.to_string()),
            e if e.fault().is_some_and(|f| f != Fault::Bug) => ApiError::device(&e),
            e if e.is_internal() => ApiError::internal(e.to_string()),
            e => ApiError::server(
                StatusCode::INTERNAL_SERVER_ERROR,
                "generation_failed",
                e.to_string(),
            ),
        }
    }
}

impl From<EngineError> for ApiError {
    /// The response for a job the engine failed.
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::Model(e) => ApiError::from(*e),
            EngineError::Panicked(what) => {
                ApiError::internal(format!("The generation failed unexpectedly: {what}"))
            }
            EngineError::ShuttingDown => ApiError::shutting_down(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_failures_map_to_statuses() {
        let full = EngineError::Model(Box::new(ModelError::ContextFull {
            needed: 9,
            context: 8,
        }));
        let cases = [
            (full, 400, "context_length_exceeded"),
            (EngineError::Panicked("boom".into()), 500, "internal_error"),
            (EngineError::ShuttingDown, 503, "shutting_down"),
        ];
        for (error, status, code) in cases {
            let api = ApiError::from(error);
            assert_eq!((api.status.as_u16(), api.code), (status, code));
        }
        let busy = ApiError::queue_full(8).into_response();
        assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
    }

    /// Failures of ours are 500 `server_error`s, the request's are 400s, whichever
    /// way they reach the handler; the body keeps OpenAI's shape either way.
    #[test]
    fn internal_errors_are_500_and_input_errors_400() {
        use crate::backend::BackendError;
        use crate::exec::ExecError;
        use crate::model::SamplerError;
        let internal = [
            ModelError::internal("a sequence was admitted without room"),
            ModelError::Run(ExecError::MissingInput("tokens".into())),
            ModelError::Backend(BackendError::Bug("a slot too small".into())),
            ModelError::Sampling(SamplerError::NoCandidates(3)),
        ];
        for e in internal {
            let text = e.to_string();
            let api = ApiError::from(EngineError::Model(Box::new(e)));
            assert_eq!((api.status.as_u16(), api.code), (500, "internal_error"));
            let response = api.clone().into_response();
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let body = api.body();
            assert_eq!(body["error"]["type"], "server_error", "{body}");
            assert_eq!(body["error"]["code"], "internal_error", "{body}");
            assert_eq!(body["error"]["message"], text.as_str(), "{body}");
            assert!(body["error"]["param"].is_null(), "{body}");
        }
        let input = [
            ModelError::Input("the prompt is empty".into()),
            ModelError::Sampling(SamplerError::InvalidConfig {
                field: "top_p",
                value: 2.0,
                expected: "in (0, 1]",
            }),
        ];
        for e in input {
            let api = ApiError::from(e);
            assert_eq!(
                (api.status.as_u16(), api.kind),
                (400, "invalid_request_error")
            );
        }
        let file = ApiError::from(ModelError::format("m.gguf", "truncated"));
        assert_eq!(
            (file.status.as_u16(), file.code),
            (500, "generation_failed")
        );
        assert_eq!(file.body()["error"]["type"], "server_error");
    }

    /// A device that is out of memory or at a limit is a 503 the client may retry; a
    /// lost one failover could not replace a 503 without a retry hint; never a 500.
    #[test]
    fn device_faults_are_503s() {
        use crate::backend::{BackendError, BackendId};
        use crate::exec::ExecError;
        let run = |source| {
            ModelError::Run(ExecError::Backend {
                partition: 0,
                id: BackendId::CPU,
                backend: "cpu".into(),
                source,
            })
        };
        let cases = [
            (
                run(BackendError::OutOfMemory("x".into())),
                "device_out_of_memory",
                Some(1),
            ),
            (
                run(BackendError::limit("blocks of the KV pool", 9, 8)),
                "device_limit",
                Some(1),
            ),
            (
                ModelError::Backend(BackendError::Lost("x".into())),
                "device_lost",
                None,
            ),
        ];
        for (error, code, retry_after) in cases {
            let text = error.to_string();
            let api = ApiError::from(EngineError::Model(Box::new(error)));
            assert_eq!((api.status.as_u16(), api.code), (503, code), "{text}");
            assert_eq!(api.retry_after, retry_after, "{text}");
            assert_eq!(api.message, text);
        }
    }
}
