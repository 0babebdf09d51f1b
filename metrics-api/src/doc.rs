//! Static documents (discovery, OpenAPI) built once at start and served with an `ETag` (the
//! aggregator sends `If-None-Match` and takes 304 as "unchanged"), and the `Accept` negotiation
//! between JSON and aggregated discovery.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};

/// `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`: what kube-aggregator
/// (1.30+) and kubectl ask `/apis` for first.
pub const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// A serialized document and its entity tag.
#[derive(Debug, Clone)]
pub struct Doc {
    body: Bytes,
    etag: HeaderValue,
    content_type: &'static str,
}

impl Doc {
    pub fn json(value: &impl serde::Serialize, content_type: &'static str) -> Self {
        let body = Bytes::from(serde_json::to_vec(value).unwrap_or_default());
        let hash = ring::digest::digest(&ring::digest::SHA256, &body);
        let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        let etag = HeaderValue::from_str(&format!("\"{hex}\"")).unwrap_or_else(|_| HeaderValue::from_static("\"0\""));
        Self { body, etag, content_type }
    }

    /// The SHA-256 of the body in hex (the `?hash=` of OpenAPI v3 discovery).
    pub fn hash(&self) -> &str {
        self.etag.to_str().unwrap_or("").trim_matches('"')
    }

    #[cfg(test)]
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// 200 with the body, or 304 when the caller already holds this version.
    pub fn respond(&self, req: &HeaderMap) -> Response {
        let fresh = req
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim() == "*" || t.trim().trim_start_matches("W/") == self.etag);
        let mut resp = if fresh {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            r
        } else {
            Response::new(Body::from(self.body.clone()))
        };
        let h = resp.headers_mut();
        h.insert(header::ETAG, self.etag.clone());
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        h.insert(header::VARY, HeaderValue::from_static("Accept"));
        resp
    }
}

/// What an `Accept` header allows for a document that also exists as aggregated discovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    AggregatedV2,
}

/// One media range of an `Accept` header: `type/subtype`, parameters (lower-cased names), q.
type MediaRange = (String, Vec<(String, String)>, f32);

fn media_ranges(accept: &str) -> Vec<MediaRange> {
    let mut out: Vec<_> = accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';');
            let mime = parts.next()?.trim().to_ascii_lowercase();
            if mime.is_empty() {
                return None;
            }
            let mut q = 1.0;
            let mut params = Vec::new();
            for p in parts {
                let (k, v) = p.split_once('=')?;
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_owned());
                if k == "q" {
                    q = v.parse().unwrap_or(0.0);
                } else {
                    params.push((k, v));
                }
            }
            Some((mime, params, q))
        })
        .filter(|(_, _, q)| *q > 0.0)
        .collect();
    // Highest q first; the header's order among equals (a stable sort).
    out.sort_by(|a, b| b.2.partial_cmp(&a.2).unwrap_or(std::cmp::Ordering::Equal));
    out
}

/// Pick the format to answer with, as the generic API server negotiates: the first acceptable
/// range wins; plain JSON is `application/json`, `application/*` or `*/*` without a conversion
/// (`as=`) parameter; aggregated discovery only where `aggregated` is offered. `None`: nothing
/// acceptable (406). No `Accept` header means JSON.
pub fn negotiate(headers: &HeaderMap, aggregated: bool) -> Option<Format> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Some(Format::Json);
    };
    if accept.trim().is_empty() {
        return Some(Format::Json);
    }
    for (mime, params, _) in media_ranges(accept) {
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        match (mime.as_str(), get("as")) {
            ("application/json", Some("APIGroupDiscoveryList"))
                if aggregated && get("g") == Some("apidiscovery.k8s.io") && get("v") == Some("v2") =>
            {
                return Some(Format::AggregatedV2);
            }
            ("application/json" | "application/*" | "*/*", None) => return Some(Format::Json),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn negotiation_follows_the_clients_that_ask() {
        // kube-aggregator: exactly AcceptV2.
        assert_eq!(negotiate(&accept(AGGREGATED_V2), true), Some(Format::AggregatedV2));
        // client-go discovery (kubectl): v2 with and without the nopeer profile, then JSON.
        let kubectl = format!("{AGGREGATED_V2};profile=nopeer,{AGGREGATED_V2},application/json");
        assert_eq!(negotiate(&accept(&kubectl), true), Some(Format::AggregatedV2));
        assert_eq!(negotiate(&accept(&kubectl), false), Some(Format::Json));
        // Only a version we do not serve: 406, which makes the aggregator fall back to legacy.
        let v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        assert_eq!(negotiate(&accept(v2beta1), true), None);
        assert_eq!(negotiate(&accept(AGGREGATED_V2), false), None);
        // kubectl get's table request falls through to JSON; protobuf alone is refused.
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(&accept(table), false), Some(Format::Json));
        assert_eq!(negotiate(&accept("application/vnd.kubernetes.protobuf"), false), None);
        assert_eq!(negotiate(&accept("application/vnd.kubernetes.protobuf, */*"), false), Some(Format::Json));
        assert_eq!(negotiate(&HeaderMap::new(), true), Some(Format::Json));
        assert_eq!(negotiate(&accept("application/json;q=0.5, application/yaml"), false), Some(Format::Json));
        assert_eq!(negotiate(&accept("application/json;q=0"), false), None);
    }

    #[test]
    fn etag_answers_304() {
        let d = Doc::json(&serde_json::json!({"a": 1}), "application/json");
        let r = d.respond(&HeaderMap::new());
        assert_eq!(r.status(), StatusCode::OK);
        let tag = r.headers()[header::ETAG].clone();
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, tag);
        assert_eq!(d.respond(&h).status(), StatusCode::NOT_MODIFIED);
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"other\""));
        assert_eq!(d.respond(&h).status(), StatusCode::OK);
    }
}
