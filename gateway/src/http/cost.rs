//! What a request will cost a worker, estimated from what the gateway has in hand (the query
//! string or the body), as the worker bounds it before tokenizing (`worker/src/core`,
//! `token_bound`): each query costs its visible characters plus two special tokens, at most
//! `--max-query-tokens`; a request costs the sum over its queries. Every token takes at least
//! one visible character, so this is never below the tokenizer's count.
//!
//! Cheap on the hot path: a query string or body shorter than `--heavy-request-tokens` cannot
//! be heavy and is charged by its length, without parsing; only longer ones are parsed (the
//! query string decoded, the body's `query` or `queries` read as JSON). A body that is not a
//! valid request costs one query's maximum: the worker refuses it at once.

use std::borrow::Cow;

use crate::config::Config;
use crate::routing::Cost;

/// The JSON fields of a `POST /predict` body that decide its cost.
#[derive(serde::Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    query: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    queries: Option<Vec<Cow<'a, str>>>,
}

/// One query's tokens at most (the worker's bound).
pub(super) fn query_tokens(q: &str, max_query_tokens: u64) -> u64 {
    let visible = q.chars().filter(|c| !c.is_whitespace()).count() as u64;
    visible.saturating_add(2).min(max_query_tokens)
}

/// The estimated cost of a request with query string `query` (still encoded) and `body`.
pub(crate) fn estimate(cfg: &Config, query: Option<&str>, body: &[u8]) -> Cost {
    let tokens = if body.is_empty() { from_query(cfg, query.unwrap_or("")) } else { from_body(cfg, body) };
    finish(cfg, tokens, if body.is_empty() { 1 } else { query_count(body) })
}

/// The estimated cost of an Open Inference Protocol request: its texts (the strings of its
/// inputs' `data`), charged as `/predict`'s queries; a body too short to be heavy by its length.
/// `texts`: how many texts the request carries, when the caller has read it already (else they
/// are counted here, from its shape).
pub(crate) fn estimate_oip(cfg: &Config, body: &[u8], texts: Option<u64>) -> Cost {
    let short = (body.len() as u64).saturating_add(2);
    let tokens = if short <= cfg.heavy_request_tokens {
        short.min(cfg.max_query_tokens)
    } else {
        match serde_json::from_slice::<OipBody>(body) {
            Ok(b) => {
                let mut sum = 0u64;
                b.inputs.iter().for_each(|i| {
                    strings(&i.data, &mut |q| sum = sum.saturating_add(query_tokens(q, cfg.max_query_tokens)))
                });
                sum
            }
            Err(_) => cfg.max_query_tokens,
        }
    };
    finish(cfg, tokens, texts.unwrap_or_else(|| oip_query_count(body)))
}

/// Whether `body` is too short to be heavy, whatever it holds: its tokens are estimated from its
/// length alone ([`estimate`], [`estimate_oip`]).
pub(crate) fn light_by_length(cfg: &Config, body: &[u8]) -> bool {
    (body.len() as u64).saturating_add(2) <= cfg.heavy_request_tokens
}

#[derive(serde::Deserialize)]
struct OipBody {
    #[serde(default)]
    inputs: Vec<OipInput>,
}

#[derive(serde::Deserialize)]
struct OipInput {
    #[serde(default)]
    data: serde_json::Value,
}

fn strings(v: &serde_json::Value, f: &mut impl FnMut(&str)) {
    match v {
        serde_json::Value::String(s) => f(s),
        serde_json::Value::Array(items) => items.iter().for_each(|i| strings(i, f)),
        _ => {}
    }
}

/// A cost from its tokens and queries.
fn finish(cfg: &Config, tokens: u64, queries: u64) -> Cost {
    let heavy = tokens > cfg.heavy_request_tokens;
    let scale = if heavy { tokens as f64 / cfg.heavy_request_tokens.max(1) as f64 } else { 1.0 };
    Cost { tokens: tokens.max(1), heavy, scale, queries: queries.max(1) }
}

/// The texts of an OIP infer request: its first input's first dimension (`[N]` or `[N, 1]`);
/// one when the body says none (the worker refuses it at once).
fn oip_query_count(body: &[u8]) -> u64 {
    #[derive(serde::Deserialize)]
    struct Shapes {
        #[serde(default)]
        inputs: Vec<Shape>,
    }
    #[derive(serde::Deserialize)]
    struct Shape {
        #[serde(default)]
        shape: Vec<u64>,
    }
    serde_json::from_slice::<Shapes>(body)
        .ok()
        .and_then(|s| s.inputs.first().and_then(|i| i.shape.first().copied()))
        .unwrap_or(1)
}

fn from_query(cfg: &Config, raw: &str) -> u64 {
    let short = (raw.len() as u64).saturating_add(2);
    if short <= cfg.heavy_request_tokens {
        return short.min(cfg.max_query_tokens);
    }
    // One `query` parameter: one query. Decoded as a form value (`+` is a space).
    let value = raw.split('&').find_map(|kv| kv.strip_prefix("query=")).unwrap_or("");
    let spaced = value.replace('+', " ");
    let decoded = percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy();
    query_tokens(&decoded, cfg.max_query_tokens)
}

fn from_body(cfg: &Config, body: &[u8]) -> u64 {
    let short = (body.len() as u64).saturating_add(2);
    if short <= cfg.heavy_request_tokens {
        return short.min(cfg.max_query_tokens);
    }
    match serde_json::from_slice::<Body<'_>>(body) {
        Ok(Body { queries: Some(qs), .. }) => {
            qs.iter().map(|q| query_tokens(q, cfg.max_query_tokens)).fold(0u64, u64::saturating_add)
        }
        Ok(Body { query: Some(q), .. }) => query_tokens(&q, cfg.max_query_tokens),
        _ => cfg.max_query_tokens,
    }
}

/// The queries of a request with this body (1 for an empty body: a `GET` of one `query`): what
/// the signal counts as offered demand. Only a body that names `queries` is parsed; one that is
/// not a valid request counts as one query (the worker refuses it at once).
pub(crate) fn query_count(body: &[u8]) -> u64 {
    #[derive(serde::Deserialize)]
    struct Many {
        queries: Vec<serde::de::IgnoredAny>,
    }
    if body.len() < 10 || !body.windows(9).any(|w| w == b"\"queries\"") {
        return 1;
    }
    serde_json::from_slice::<Many>(body).map_or(1, |m| (m.queries.len() as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oip_request_counts_its_texts() {
        let cfg = Config::for_tests();
        let body = br#"{"inputs":[{"name":"text","datatype":"BYTES","shape":[3],"data":["a","b","c"]}]}"#;
        assert_eq!(estimate_oip(&cfg, body, None).queries, 3);
        let body = br#"{"inputs":[{"name":"text","datatype":"BYTES","shape":[2,1],"data":[["a"],["b"]]}]}"#;
        assert_eq!(estimate_oip(&cfg, body, None).queries, 2);
        assert_eq!(estimate_oip(&cfg, b"not json", None).queries, 1);
        // Counted by the caller, which has read the request already: not read again here.
        assert_eq!(estimate_oip(&cfg, b"not json", Some(3)).queries, 3);
    }

    #[test]
    fn queries_are_counted_from_the_body() {
        assert_eq!(query_count(b""), 1);
        assert_eq!(query_count(br#"{"query":"play jazz"}"#), 1);
        assert_eq!(query_count(br#"{"queries":["a","b","c"],"all_scores":true}"#), 3);
        assert_eq!(query_count(br#"{"queries":[]}"#), 1);
        assert_eq!(query_count(br#"{"queries": "#), 1, "not a request: one query");
    }

    #[test]
    fn light_and_heavy_requests() {
        let cfg = Config::for_tests();
        let c = estimate(&cfg, Some("query=play%20jazz"), b"");
        assert!(!c.heavy && c.tokens <= 20, "{c:?}");
        let c = estimate(&cfg, None, br#"{"query":"play some jazz"}"#);
        assert!(!c.heavy && c.scale == 1.0, "{c:?}");
        // The issue's heavy request: 64 queries of maximum length.
        let long = "supercalifragilistic ".repeat(100);
        let body = serde_json::json!({ "queries": vec![long.clone(); 64] }).to_string();
        let c = estimate(&cfg, None, body.as_bytes());
        assert_eq!(c.tokens, 64 * 128, "each query at most --max-query-tokens");
        assert!(c.heavy);
        assert_eq!(c.scale, 32.0);
        // A batch of short queries costs its number of queries and their length.
        let body = serde_json::json!({ "queries": vec!["play jazz"; 40] }).to_string();
        let c = estimate(&cfg, None, body.as_bytes());
        assert_eq!(c.tokens, 40 * 10);
        assert!(c.heavy);
        // One long query in the query string: at most one query's maximum.
        let q = format!("query={}", "a+".repeat(300));
        assert_eq!(estimate(&cfg, Some(&q), b"").tokens, 128);
        assert!(estimate(&cfg, Some(&q), b"").tokens <= cfg.heavy_request_tokens);
        // Not a request: one query's worth.
        assert_eq!(estimate(&cfg, None, &[b'x'; 4000]).tokens, 128);
    }

    #[test]
    fn oip_requests_cost_their_texts_as_queries_do() {
        let cfg = Config::for_tests();
        let oip = |texts: serde_json::Value| {
            let body =
                serde_json::json!({"inputs": [{"name": "text", "shape": [64], "datatype": "BYTES", "data": texts}]});
            estimate_oip(&cfg, body.to_string().as_bytes(), None)
        };
        let c = oip(serde_json::json!(["play jazz"]));
        assert!(!c.heavy, "{c:?}");
        // The same batch as /predict's: the same cost, nested ([N, 1]) or flat.
        let c = oip(serde_json::json!(vec![["play jazz"]; 40]));
        assert_eq!((c.tokens, c.heavy), (400, true));
        let long = "supercalifragilistic ".repeat(100);
        assert_eq!(oip(serde_json::json!(vec![long; 64])).tokens, 64 * 128);
        assert_eq!(estimate_oip(&cfg, &[b'x'; 4000], None).tokens, 128);
    }

    #[test]
    fn the_estimate_is_never_below_the_workers_bound() {
        let cfg = Config::for_tests();
        for q in ["Music", "play some jazz music", "ÉTÉ à Zürich, 北京", "a b c d e f g"] {
            let body = serde_json::json!({ "query": q }).to_string();
            let bound = query_tokens(q, cfg.max_query_tokens);
            assert!(estimate(&cfg, None, body.as_bytes()).tokens >= bound, "{q}");
        }
    }
}
