//! Sending requests: one pooled HTTP/1 client, closed- or open-loop.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::Config;
use crate::report::{Outcome, Step};

#[derive(Debug, Clone, Copy)]
pub enum Mode {
    Clients(usize),
    Rate(f64),
}

/// What to send and how.
#[derive(Debug, Clone)]
pub struct Target {
    client: Client<HttpConnector, Empty<Bytes>>,
    uris: Arc<[Uri]>,
    timeout: Duration,
}

impl Target {
    pub fn new(config: &Config, queries: &[String]) -> anyhow::Result<Self> {
        let base = config.url.trim_end_matches('/');
        let uris = queries
            .iter()
            .map(|q| {
                let q = percent_encoding::utf8_percent_encode(q, percent_encoding::NON_ALPHANUMERIC);
                format!("{base}{}?query={q}", config.path).parse::<Uri>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(connector);
        Ok(Self { client, uris: uris.into(), timeout: config.timeout() })
    }

    async fn send(&self, i: usize) -> Outcome {
        let uri = self.uris[i % self.uris.len()].clone();
        let call = async {
            let resp = self.client.get(uri).await.map_err(|e| Outcome::Transport(short(&e)))?;
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.map_err(|e| Outcome::Transport(short(&e)))?.to_bytes();
            if status == 200 {
                return Ok(Outcome::Ok);
            }
            let kind = serde_json::from_slice::<wire::ErrorBody>(&body)
                .map(|b| b.error_type.as_str().to_owned())
                .unwrap_or_else(|_| "non_json".into());
            Err(Outcome::Status(status, kind))
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(o) | Err(o)) => o,
            Err(_) => Outcome::Timeout,
        }
    }
}

fn short(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s = inner.to_string();
        src = inner.source();
    }
    s
}

/// Runs one step for `duration` and returns its figures.
pub async fn step(target: &Target, mode: Mode, duration: Duration, max_in_flight: usize) -> Step {
    let started = Instant::now();
    let end = started + duration;
    let mut step = Step::new(mode);
    match mode {
        Mode::Clients(n) => {
            let tasks: Vec<_> = (0..n)
                .map(|c| {
                    let target = target.clone();
                    tokio::spawn(async move {
                        let mut local = Step::new(mode);
                        let mut i = c * 7;
                        while Instant::now() < end {
                            let t = Instant::now();
                            let outcome = target.send(i).await;
                            local.record(outcome, t.elapsed());
                            i += 1;
                        }
                        local
                    })
                })
                .collect();
            for t in tasks {
                if let Ok(local) = t.await {
                    step.merge(&local);
                }
            }
        }
        Mode::Rate(rate) => {
            let period = Duration::from_secs_f64(1.0 / rate.max(0.001));
            let limit = Arc::new(Semaphore::new(max_in_flight.max(1)));
            let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut i = 0usize;
            let mut in_flight = Vec::new();
            while Instant::now() < end {
                let scheduled = ticker.tick().await;
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    step.record(Outcome::Dropped, Duration::ZERO);
                    continue;
                };
                let target = target.clone();
                let tx = tx.clone();
                in_flight.push(tokio::spawn(async move {
                    let outcome = target.send(i).await;
                    let _ = tx.send((outcome, scheduled.elapsed())).await;
                    drop(permit);
                }));
                i += 1;
                while let Ok((o, d)) = rx.try_recv() {
                    step.record(o, d);
                }
            }
            drop(tx);
            while let Some((o, d)) = rx.recv().await {
                step.record(o, d);
            }
        }
    }
    step.finish(started.elapsed());
    step
}
