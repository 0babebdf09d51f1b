//! Which client requests may be merged with others bound for the same worker (`routing::coalesce`):
//! a `/predict` request of exactly one query, in a form the worker's list form answers the same
//! way, read here as the worker reads it (`worker/src/http/predict.rs`):
//!
//! * `GET ?query=VALUE` and nothing else (no `all_scores`, no other parameter), `VALUE` decoded
//!   as the form decoder decodes it (`+` a space, `%` and two hex digits a byte, any other `%`
//!   itself) into valid UTF-8;
//! * `POST {"query": "..."}`: a JSON object with `query` and no `queries`, no `all_scores` (or
//!   `false`), no other field;
//! * a query the worker takes: not empty or blank (a merge with one query the worker refuses
//!   would be refused whole; such a request goes alone and gets the worker's 400).
//!
//! And an Open Inference Protocol inference of one text ([`oip`](fn@oip)): `POST
//! /v2/models/{model}[/versions/{version}]/infer` whose body the `oip` crate reads as a request
//! of exactly one text, not blank, without the `logits` output (a `/predict` answer has no
//! logits), and without Triton's binary tensor header. Its answer is made from the merge's item
//! as the worker makes it; it goes in a merge only to a worker whose stats name that model (else
//! alone, and the worker answers it).
//!
//! Everything else goes alone, as it came: `all_scores` (the list form takes it for the whole
//! list, so it could not differ within a merge), `{"queries": [...]}`, heavy requests, bodies
//! the worker refuses, `HEAD`, and the Open Inference Protocol's other routes. A query that turns out
//! refused for another reason (longer than the worker's `--max-query-bytes`) makes the worker
//! refuse its merge; its members are then sent alone (`routing::coalesce`).

use http::Method;

use super::cost::query_tokens;
use crate::routing::{OipSingle, Single};

/// The request's one query if it may be merged (see the module documentation); `query` is the
/// raw query string, `max_query_tokens` the cap of one query's estimate.
pub(super) fn single(method: &Method, query: Option<&str>, body: &[u8], max_query_tokens: u64) -> Option<Single> {
    let q = if *method == Method::GET {
        wire::decode_lone_query(query?)?
    } else if *method == Method::POST {
        from_body(body)?
    } else {
        return None;
    };
    if q.trim().is_empty() {
        return None;
    }
    Single::new(&q, query_tokens(&q, max_query_tokens))
}

/// The request's one text if it is an Open Inference Protocol inference that may be merged
/// (see the module documentation); `path` is the worker's route, `/v2/models/...`.
pub(super) fn oip(path: &str, headers: &http::HeaderMap, body: &[u8], max_query_tokens: u64) -> Option<Single> {
    let (model, version, call) = oip_request(path, headers, body)?;
    oip_call(model, version, call, max_query_tokens, None)
}

/// The model, version and call of an inference (`path` `/v2/models/...`) whose JSON body the
/// `oip` crate reads as the worker does, without Triton's binary tensor header; read once, by
/// the predict entry, for its cost (its texts) and [`oip_call`] (a merge).
pub(super) fn oip_request(
    path: &str,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Option<(String, Option<String>, oip::InferCall)> {
    let (model, version) = infer_route(path)?;
    if headers.contains_key(&BINARY_HEADER) {
        return None;
    }
    Some((model, version, oip::InferCall::from_json(body).ok()?))
}

/// A checked inference `call` of model `model` (and `version`) if it may be merged: one text,
/// not blank, without `logits`. The gRPC service checks its calls here too, and hands the result
/// to the predict entry with the call ([`super::predict::ProtocolCall`]).
pub(crate) fn oip_call(
    model: String,
    version: Option<String>,
    mut call: oip::InferCall,
    max_query_tokens: u64,
    reply: Option<std::sync::Arc<std::sync::OnceLock<wire::Prediction>>>,
) -> Option<Single> {
    if call.texts.len() != 1 || call.wants(oip::Output::Logits) {
        return None;
    }
    let text = call.texts.pop()?;
    if text.trim().is_empty() {
        return None;
    }
    let tokens = query_tokens(&text, max_query_tokens);
    Single::oip(&text, tokens, OipSingle { model, version, call, reply })
}

/// Triton's binary tensor extension's header (the header map is searched by name, not parsed).
pub(crate) static BINARY_HEADER: http::HeaderName = http::HeaderName::from_static("inference-header-content-length");

/// The model and version of an inference route, `/v2/models/{model}[/versions/{version}]/infer`,
/// percent-decoded as the worker's router decodes path parameters.
fn infer_route(path: &str) -> Option<(String, Option<String>)> {
    let rest = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    let decode = |s: &str| {
        (!s.is_empty() && !s.contains('/'))
            .then(|| percent_encoding::percent_decode_str(s).decode_utf8().ok().map(|c| c.into_owned()))
            .flatten()
    };
    // Split at the first `/` (neither name holds one): cheaper than a search for "/versions/".
    match rest.split_once('/') {
        Some((model, tail)) => Some((decode(model)?, Some(decode(tail.strip_prefix("versions/")?)?))),
        None => Some((decode(rest)?, None)),
    }
}

/// The `query` of a body `{"query": "..."}` the worker takes as one query without `all_scores`.
fn from_body(body: &[u8]) -> Option<String> {
    // The worker refuses a body that is not a JSON object (serde would read a struct from an
    // array); only objects are requests.
    if body.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r')) != Some(&b'{') {
        return None;
    }
    match serde_json::from_slice::<wire::PredictRequest>(body) {
        Ok(wire::PredictRequest { query: Some(q), queries: None, all_scores: false }) => Some(q),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(raw: &str) -> Option<Single> {
        single(&Method::GET, Some(raw), b"", 128)
    }

    fn post(body: &str) -> Option<Single> {
        single(&Method::POST, None, body.as_bytes(), 128)
    }

    #[test]
    fn one_query_without_options_may_be_merged() {
        assert_eq!(get("query=play+some%20jazz"), Single::new("play some jazz", 14));
        assert_eq!(get("query=100%"), Single::new("100%", 6), "a lone % is itself, as the worker reads it");
        assert_eq!(post(r#" {"query": "play \"jazz\""} "#), Single::new("play \"jazz\"", 12));
        assert_eq!(post(r#"{"query":"x","all_scores":false}"#), Single::new("x", 3));
    }

    #[test]
    fn anything_the_list_form_would_answer_differently_goes_alone() {
        for raw in [
            "query=a&all_scores=true",
            "all_scores=true&query=a",
            "query=a&x=1",
            "q=a",
            "query=%FF",
            "query=",
            "query=+%20",
        ] {
            assert_eq!(get(raw), None, "{raw}");
        }
        assert_eq!(single(&Method::GET, None, b"", 128), None);
        for body in [
            r#"{"query":"a","all_scores":true}"#,
            r#"{"queries":["a"]}"#,
            r#"{"query":"a","queries":["b"]}"#,
            r#"{"query":"a","extra":1}"#,
            r#"["a"]"#,
            r#"{"query":"  "}"#,
            r#"{"query":"a""#,
            "",
        ] {
            assert_eq!(post(body), None, "{body}");
        }
        assert_eq!(single(&Method::HEAD, Some("query=a"), b"", 128), None);
        assert_eq!(single(&Method::PUT, None, br#"{"query":"a"}"#, 128), None);
    }

    fn oip_req(path: &str, body: &str) -> Option<Single> {
        oip(path, &http::HeaderMap::new(), body.as_bytes(), 128)
    }

    const ONE: &str = r#"{"id":"7","parameters":{"x":1},"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["play jazz"]}]}"#;

    #[test]
    fn an_inference_of_one_text_may_be_merged_to_a_worker_serving_its_model() {
        let s = oip_req("/v2/models/m/infer", ONE).expect("one text");
        assert_eq!(s.tokens(), 10, "its visible characters plus two");
        let o = s.oip_form().unwrap();
        assert_eq!((o.model.as_str(), o.version.as_deref(), o.call.id.as_deref()), ("m", None, Some("7")));
        assert!(o.call.texts.is_empty(), "the text is the merge's, not kept twice");
        let v = oip_req("/v2/models/my%20model/versions/1/infer", ONE).unwrap();
        let o = v.oip_form().unwrap();
        assert_eq!((o.model.as_str(), o.version.as_deref()), ("my model", Some("1")), "decoded as the worker decodes");
        let column = r#"{"inputs":[{"name":"text","shape":[1,1],"datatype":"BYTES","data":[["a"]]}],"outputs":[{"name":"score"}]}"#;
        assert!(oip_req("/v2/models/m/infer", column).unwrap().oip_form().unwrap().call.column);
    }

    #[test]
    fn inferences_the_list_form_cannot_answer_go_alone() {
        let two = r#"{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["a","b"]}]}"#;
        let logits =
            r#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}],"outputs":[{"name":"logits"}]}"#;
        let blank = r#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":[" "]}]}"#;
        let wrong = r#"{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["a"]}]}"#;
        for body in [two, logits, blank, wrong, "{", ""] {
            assert_eq!(oip_req("/v2/models/m/infer", body), None, "{body}");
        }
        for path in [
            "/v2/models/m/ready",
            "/v2/models/m",
            "/v2/models//infer",
            "/v2/models/a/b/infer",
            "/v2/models/m/versions//infer",
            "/v2/models/m/versions/1/2/infer",
            "/v2/models/m/version/1/infer",
            "/v2/models/a/b/versions/1/infer",
        ] {
            assert_eq!(oip_req(path, ONE), None, "{path}");
        }
        let mut binary = http::HeaderMap::new();
        binary.insert("inference-header-content-length", "10".parse().unwrap());
        assert_eq!(oip("/v2/models/m/infer", &binary, ONE.as_bytes(), 128), None, "Triton's binary extension");
    }

    #[test]
    fn a_query_costs_its_visible_characters_plus_two_at_most_the_cap() {
        let long = format!("query={}", "ab+".repeat(200));
        assert_eq!(single(&Method::GET, Some(&long), b"", 128).map(|s| s.tokens()), Some(128));
    }
}
