//! A small HTTP client for tests: every answer is read whole, its body parsed as JSON when it is.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

/// A client with a 30 s timeout per request.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("HTTP client")
}

/// An answer, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body as JSON, or as a JSON string when it is not JSON.
    pub body: Value,
}

impl Answer {
    pub async fn read(resp: reqwest::Response) -> Self {
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("reading the body");
        let body =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        Self { status, headers, body }
    }

    /// The body's `error_type`, for error answers.
    pub fn error_type(&self) -> Option<&str> {
        self.body.get("error_type").and_then(Value::as_str)
    }
}

pub async fn get(c: &reqwest::Client, url: &str) -> Answer {
    Answer::read(c.get(url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"))).await
}

/// POSTs `body` as `application/json`.
pub async fn post(c: &reqwest::Client, url: &str, body: impl Into<reqwest::Body>) -> Answer {
    let resp = c.post(url).header("content-type", "application/json").body(body).send().await;
    Answer::read(resp.unwrap_or_else(|e| panic!("POST {url}: {e}"))).await
}
