//! What is sent: the server's address and the requests of the query mix, encoded once.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Uri};

use crate::Error;

/// HTTP version spoken to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
pub enum Http {
    /// HTTP/1.1 with keep-alive, one request at a time per connection.
    #[value(name = "1.1")]
    #[serde(rename = "1.1")]
    Http1,
    /// HTTP/2 over cleartext with prior knowledge (h2c), requests multiplexed as streams.
    #[value(name = "2")]
    #[serde(rename = "2")]
    Http2,
}

/// How the queries are put in requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// `GET PATH?query=...`
    Get,
    /// `POST PATH` with `{"query": "..."}`, or `{"queries": [...]}` with `--batch` above 1.
    Post,
}

/// Which protocol the requests speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// The project's `/predict` (`--method get|post`).
    Predict,
    /// The Open Inference Protocol over REST: `POST /v2/models/{model}/infer` with a BYTES
    /// tensor of `--batch` texts.
    Oip,
    /// The Open Inference Protocol over gRPC (`ModelInfer` on h2c, `--http 2` implied): the
    /// same tensor in raw contents; a call is a success when its `grpc-status` is 0.
    Grpc,
}

/// The gRPC method `--protocol grpc` calls.
pub const GRPC_INFER_PATH: &str = "/inference.GRPCInferenceService/ModelInfer";

/// One request of the mix, ready for either protocol.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The whole HTTP/1.1 request.
    pub h1: Bytes,
    /// Absolute URI, for HTTP/2.
    pub uri: Uri,
    pub body: Bytes,
}

/// The server and the mix.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// `host:port` as written in the URL (the `Host` header).
    pub authority: String,
    pub method: Method,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub requests: Arc<[Prepared]>,
    pub http: Http,
    /// gRPC: the outcome is the `grpc-status` trailer's, not the HTTP status.
    pub grpc: bool,
}

/// How to build the target.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    pub url: &'a str,
    pub path: &'a str,
    pub shape: Shape,
    pub batch: usize,
    pub headers: &'a [String],
    pub http: Http,
    pub protocol: Protocol,
    /// The model an Open Inference Protocol request names.
    pub model: &'a str,
}

impl Target {
    pub fn new(spec: &Spec<'_>, queries: &[String]) -> Result<Self, Error> {
        let bad = |why: &str| Error::Target(format!("--url {:?}: {why}", spec.url));
        let uri: Uri = spec.url.parse().map_err(|e| bad(&format!("{e}")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => return Err(bad(&format!("scheme {other} is not supported (http only; h2c with --http 2)"))),
            None => return Err(bad("expected http://HOST:PORT")),
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?.clone();
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(80);
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|e| bad(&format!("resolving the host: {e}")))?
            .next()
            .ok_or_else(|| bad("the host has no address"))?;
        // A path given in the URL counts as the prefix of --path.
        let prefix = uri.path().trim_end_matches('/');
        let path = match spec.protocol {
            Protocol::Predict => format!("{prefix}{}", spec.path),
            // `--path` left at its default: the protocol's own route.
            Protocol::Oip if spec.path == "/predict" => format!("{prefix}/v2/models/{}/infer", spec.model),
            Protocol::Oip => format!("{prefix}{}", spec.path),
            Protocol::Grpc => GRPC_INFER_PATH.to_owned(),
        };
        let mut headers = spec.headers.iter().map(|h| parse_header(h)).collect::<Result<Vec<_>, _>>()?;
        let grpc = spec.protocol == Protocol::Grpc;
        if grpc {
            headers.push((http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc")));
            headers.push((http::header::TE, HeaderValue::from_static("trailers")));
        }
        if queries.is_empty() {
            return Err(Error::Target("the query mix is empty".to_owned()));
        }
        let batch = spec.batch.max(1);
        let method = match (spec.protocol, spec.shape) {
            (Protocol::Oip | Protocol::Grpc, _) => Method::POST,
            (_, Shape::Get) if batch > 1 => return Err(Error::Target("--batch needs --method post".to_owned())),
            (_, Shape::Get) => Method::GET,
            (_, Shape::Post) => Method::POST,
        };
        let requests = (0..queries.len())
            .map(|i| {
                let texts = || (0..batch).map(|k| queries[(i + k) % queries.len()].clone()).collect::<Vec<_>>();
                let (path_and_query, body) = match (spec.protocol, spec.shape) {
                    (Protocol::Oip, _) => (path.clone(), Bytes::from(oip_body(&texts()))),
                    (Protocol::Grpc, _) => (path.clone(), grpc_body(spec.model, &texts())),
                    (Protocol::Predict, Shape::Get) => {
                        let q = percent_encoding::utf8_percent_encode(&queries[i], percent_encoding::NON_ALPHANUMERIC);
                        let sep = if path.contains('?') { '&' } else { '?' };
                        (format!("{path}{sep}query={q}"), Bytes::new())
                    }
                    (Protocol::Predict, Shape::Post) if batch == 1 => {
                        (path.clone(), Bytes::from(json_body("query", &queries[i..=i])))
                    }
                    (Protocol::Predict, Shape::Post) => (path.clone(), Bytes::from(json_body("queries", &texts()))),
                };
                let h1 = encode_h1(&method, &path_and_query, authority.as_str(), &headers, &body);
                let uri =
                    format!("http://{authority}{path_and_query}").parse::<Uri>().map_err(|e| bad(&format!("{e}")))?;
                Ok(Prepared { h1, uri, body })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Self {
            addr,
            authority: authority.as_str().to_owned(),
            method,
            headers,
            requests: requests.into(),
            http: if grpc { Http::Http2 } else { spec.http },
            grpc,
        })
    }

    pub fn request(&self, i: u64) -> &Prepared {
        &self.requests[(i % self.requests.len() as u64) as usize]
    }
}

fn json_body(key: &str, queries: &[String]) -> Vec<u8> {
    let value =
        if key == "query" { serde_json::json!({ "query": queries[0] }) } else { serde_json::json!({ key: queries }) };
    serde_json::to_vec(&value).expect("JSON of strings")
}

/// An Open Inference Protocol REST body: one BYTES tensor `text` of shape `[N]`.
fn oip_body(texts: &[String]) -> Vec<u8> {
    let value = serde_json::json!({
        "inputs": [{"name": "text", "shape": [texts.len()], "datatype": "BYTES", "data": texts}]
    });
    serde_json::to_vec(&value).expect("JSON of strings")
}

/// A gRPC message (the 5-byte frame header and the encoded `ModelInferRequest`).
fn grpc_body(model: &str, texts: &[String]) -> Bytes {
    use oip::pb::ModelInferRequest;
    use oip::pb::model_infer_request::InferInputTensor;
    use prost::Message as _;
    let req = ModelInferRequest {
        model_name: model.to_owned(),
        inputs: vec![InferInputTensor {
            name: "text".to_owned(),
            datatype: "BYTES".to_owned(),
            shape: vec![texts.len() as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![oip::call::encode_raw_bytes(texts.iter().map(String::as_str))],
        ..Default::default()
    };
    let msg = req.encode_to_vec();
    let mut framed = Vec::with_capacity(5 + msg.len());
    framed.push(0);
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    Bytes::from(framed)
}

fn parse_header(h: &str) -> Result<(HeaderName, HeaderValue), Error> {
    let bad = || Error::Target(format!("--header {h:?}: expected \"Name: value\""));
    let (name, value) = h.split_once(':').ok_or_else(bad)?;
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
    let value = HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
    if matches!(name.as_str(), "host" | "content-length" | "transfer-encoding" | "connection") {
        return Err(Error::Target(format!("--header {h:?}: {name} is set by the load generator")));
    }
    Ok((name, value))
}

fn encode_h1(
    method: &Method,
    path_and_query: &str,
    host: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: &[u8],
) -> Bytes {
    use std::io::Write as _;
    let mut w = Vec::with_capacity(128 + path_and_query.len() + body.len());
    let _ = write!(w, "{method} {path_and_query} HTTP/1.1\r\nhost: {host}\r\n");
    for (name, value) in headers {
        w.extend_from_slice(name.as_str().as_bytes());
        w.extend_from_slice(b": ");
        w.extend_from_slice(value.as_bytes());
        w.extend_from_slice(b"\r\n");
    }
    if *method == Method::POST {
        if !headers.iter().any(|(n, _)| n == http::header::CONTENT_TYPE) {
            w.extend_from_slice(b"content-type: application/json\r\n");
        }
        let _ = write!(w, "content-length: {}\r\n", body.len());
    }
    w.extend_from_slice(b"\r\n");
    w.extend_from_slice(body);
    Bytes::from(w)
}

/// The built-in query mix: SNIPS test utterances, one a line.
pub fn builtin_queries() -> Vec<String> {
    lines(include_str!("../queries.txt"))
}

/// Non-empty trimmed lines.
pub fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(shape: Shape, batch: usize, headers: &'a [String]) -> Spec<'a> {
        Spec {
            url: "http://127.0.0.1:8080",
            path: "/predict",
            shape,
            batch,
            headers,
            http: Http::Http1,
            protocol: Protocol::Predict,
            model: "m",
        }
    }

    #[test]
    fn get_requests_carry_the_query_encoded_and_the_host() {
        let t = Target::new(&spec(Shape::Get, 1, &[]), &["play jazz & blues".into()]).unwrap();
        assert_eq!(
            &t.request(0).h1[..],
            b"GET /predict?query=play%20jazz%20%26%20blues HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n\r\n"
        );
        assert_eq!(t.request(0).uri.to_string(), "http://127.0.0.1:8080/predict?query=play%20jazz%20%26%20blues");
    }

    #[test]
    fn post_requests_are_single_or_batched_json_with_length_and_custom_headers() {
        let qs: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let h = vec!["x-tenant: blue".to_owned()];
        let one = Target::new(&spec(Shape::Post, 1, &h), &qs).unwrap();
        assert_eq!(
            std::str::from_utf8(&one.request(1).h1).unwrap(),
            "POST /predict HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nx-tenant: blue\r\ncontent-type: application/json\r\ncontent-length: 13\r\n\r\n{\"query\":\"b\"}"
        );
        let batch = Target::new(&spec(Shape::Post, 2, &[]), &qs).unwrap();
        assert_eq!(&batch.request(2).body[..], br#"{"queries":["c","a"]}"#);
        assert!(Target::new(&spec(Shape::Get, 2, &[]), &qs).is_err(), "batches are POSTs");
        assert!(Target::new(&spec(Shape::Get, 1, &["host: x".into()]), &qs).is_err());
    }

    #[test]
    fn only_plain_http_urls_are_taken() {
        let qs = ["a".to_owned()];
        for url in ["https://127.0.0.1:1", "127.0.0.1:1", "http://"] {
            let s = Spec { url, ..spec(Shape::Get, 1, &[]) };
            assert!(Target::new(&s, &qs).is_err(), "{url}");
        }
        let s = Spec { url: "http://localhost:9/gw/", ..spec(Shape::Get, 1, &[]) };
        let t = Target::new(&s, &qs).unwrap();
        assert!(t.request(0).h1.starts_with(b"GET /gw/predict?query=a HTTP/1.1\r\nhost: localhost:9\r\n"));
    }

    #[test]
    fn oip_requests_over_rest_and_grpc() {
        let qs: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let rest = Target::new(&Spec { protocol: Protocol::Oip, ..spec(Shape::Get, 2, &[]) }, &qs).unwrap();
        assert_eq!(rest.method, Method::POST);
        assert_eq!(rest.request(0).uri.path(), "/v2/models/m/infer");
        let body: serde_json::Value = serde_json::from_slice(&rest.request(2).body).unwrap();
        assert_eq!(body["inputs"][0]["data"], serde_json::json!(["c", "a"]));
        let grpc = Target::new(&Spec { protocol: Protocol::Grpc, ..spec(Shape::Get, 2, &[]) }, &qs).unwrap();
        assert!(grpc.grpc && grpc.http == Http::Http2, "gRPC is HTTP/2");
        assert_eq!(grpc.request(0).uri.path(), GRPC_INFER_PATH);
        let frame = &grpc.request(0).body;
        assert_eq!((frame[0], u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize), (0, frame.len() - 5));
        let req = <oip::pb::ModelInferRequest as prost::Message>::decode(&frame[5..]).unwrap();
        assert_eq!(oip::InferCall::from_pb(req).unwrap().texts, ["a", "b"]);
    }

    #[test]
    fn the_builtin_mix_is_not_empty() {
        assert!(builtin_queries().len() >= 50);
    }
}
