//! Who may call the API: with an [`ApiKey`], every `/v1` request must carry it as
//! `Authorization: Bearer <key>` (what the `openai` client sends from its `api_key`);
//! `/health` and `/metrics` stay open for probes and scrapers, as in vLLM.

use std::fmt;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

use super::error::ApiError;
use super::routes::App;

/// A secret clients must present: non-empty printable ASCII without spaces, so it
/// travels in a header unchanged. Its `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Checks `key`; the error says what is wrong with it, never the key.
    pub fn new(key: &str) -> Result<ApiKey, String> {
        if key.is_empty() {
            return Err("an API key cannot be empty".into());
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("an API key takes printable ASCII characters without spaces".into());
        }
        Ok(ApiKey(key.to_string()))
    }

    /// Whether `presented` is this key, comparing every byte whatever the first
    /// difference, so timing does not tell how much of a guess was right.
    fn matches(&self, presented: &[u8]) -> bool {
        let key = self.0.as_bytes();
        let differ = presented
            .iter()
            .zip(key)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        differ == 0 && presented.len() == key.len()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

/// Refuses a request without the server's key (when it has one) with a 401.
pub(crate) async fn require_key(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(key) = &app.api_key else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    match presented {
        Some(token) if key.matches(token) => next.run(request).await,
        Some(_) => ApiError::unauthorized("Incorrect API key provided.").into_response(),
        None => ApiError::unauthorized(
            "You didn't provide an API key: send it as 'Authorization: Bearer <key>'.",
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_and_compared_whole() {
        let key = ApiKey::new("sk-local-123").unwrap();
        assert!(key.matches(b"sk-local-123"));
        assert!(!key.matches(b"sk-local-12"));
        assert!(!key.matches(b"sk-local-1234"));
        assert!(!key.matches(b"sk-local-124"));
        assert!(!key.matches(b""));
        assert!(ApiKey::new("").is_err());
        assert!(ApiKey::new("has space").is_err());
        assert!(ApiKey::new("naïve").is_err());
        assert_eq!(format!("{key:?}"), "ApiKey(..)");
    }
}
