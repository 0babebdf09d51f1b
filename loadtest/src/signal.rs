//! Sampling a gateway's scaling signal during the run: `GET {admin}/pools/{pool}/signal` on the
//! gateway's admin port, which answers the pool's `wire::PoolSignal`:
//! `{"pool", "signal", "stale", "components": {"raw", "queue", "gpu", "workers", ...}, ...}`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::Error;
use crate::http1;
use crate::summary::SignalSample;

/// Where to read the signal.
#[derive(Debug, Clone)]
pub struct Source {
    pub url: String,
    pub pool: String,
    addr: SocketAddr,
    request: Vec<u8>,
}

impl Source {
    pub fn new(url: &str, pool: &str) -> Result<Self, Error> {
        let bad = |why: String| Error::Target(format!("--gateway-admin {url:?}: {why}"));
        let uri: http::Uri = url.parse().map_err(|e| bad(format!("{e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad("expected http://HOST:PORT".to_owned()));
        }
        let authority = uri.authority().ok_or_else(|| bad("no host".to_owned()))?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        let addr = (host, authority.port_u16().unwrap_or(80))
            .to_socket_addrs()
            .map_err(|e| bad(format!("{e}")))?
            .next()
            .ok_or_else(|| bad("no address".to_owned()))?;
        let pool_enc = percent_encoding::utf8_percent_encode(pool, percent_encoding::NON_ALPHANUMERIC);
        let prefix = uri.path().trim_end_matches('/');
        let request =
            format!("GET {prefix}/pools/{pool_enc}/signal HTTP/1.1\r\nhost: {authority}\r\n\r\n").into_bytes();
        Ok(Self { url: url.to_owned(), pool: pool.to_owned(), addr, request })
    }
}

/// A keep-alive reader of one pool's signal.
#[derive(Debug)]
pub struct Sampler {
    source: Source,
    conn: Option<http1::Conn>,
    timeout: Duration,
}

impl Sampler {
    pub fn new(source: Source, timeout: Duration) -> Self {
        Self { source, conn: None, timeout }
    }

    /// One reading at `t` seconds from the start.
    pub async fn sample(&mut self, t: f64) -> Result<SignalSample, String> {
        match tokio::time::timeout(self.timeout, self.read()).await {
            Ok(Ok(body)) => parse(&body, t),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                self.conn = None;
                Err(format!("no answer within {:?}", self.timeout))
            }
        }
    }

    async fn read(&mut self) -> Result<bytes::Bytes, String> {
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => http1::Conn::connect(self.source.addr).await.map_err(|e| format!("connect: {e}"))?,
        };
        let answer = match conn.exchange(&self.source.request, false, true).await {
            Err(http1::Failure::Stale) => {
                conn = http1::Conn::connect(self.source.addr).await.map_err(|e| format!("connect: {e}"))?;
                conn.exchange(&self.source.request, false, true).await
            }
            other => other,
        }
        .map_err(|e| format!("{e:?}"))?;
        if answer.keep_alive {
            self.conn = Some(conn);
        }
        let body = answer.body.unwrap_or_default();
        if answer.status != 200 {
            return Err(format!("HTTP {}: {}", answer.status, String::from_utf8_lossy(&body[..body.len().min(200)])));
        }
        Ok(body)
    }
}

fn parse(body: &[u8], t: f64) -> Result<SignalSample, String> {
    let s: wire::PoolSignal = serde_json::from_slice(body).map_err(|e| format!("not a pool signal: {e}"))?;
    let c = s.components;
    Ok(SignalSample {
        t,
        signal: s.signal,
        stale: s.stale,
        raw: c.raw,
        queue: c.queue,
        gpu: c.gpu,
        workers: c.workers as u64,
        held: s.held_requests,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateways_pool_signal_is_read() {
        // As the gateway serializes `wire::PoolSignal` (an older one: no namespace, no ready workers).
        let body = br#"{"pool":"default","signal":2.5,"stale":false,
            "components":{"raw":2.7,"queue":2.7,"gpu":0.0,"held":0.0,"backlog":0.0,"workers":2,"blind":0,"gpu_missing":2},
            "targets_queue":8.0,"targets_gpu_pct":70.0,"updated_unix_ms":1}"#;
        let s = parse(body, 3.0).unwrap();
        assert_eq!(
            s,
            SignalSample { t: 3.0, signal: 2.5, stale: false, raw: 2.7, queue: 2.7, gpu: 0.0, workers: 2, held: 0 }
        );
        assert!(parse(br#"{"error":"no such pool","error_type":"not_found"}"#, 0.0).is_err());
    }

    #[test]
    fn the_request_names_the_pool_under_the_admin_url() {
        let s = Source::new("http://127.0.0.1:9090", "gpu pool").unwrap();
        assert_eq!(s.request, b"GET /pools/gpu%20pool/signal HTTP/1.1\r\nhost: 127.0.0.1:9090\r\n\r\n");
        assert!(Source::new("https://127.0.0.1:9090", "default").is_err());
    }
}
