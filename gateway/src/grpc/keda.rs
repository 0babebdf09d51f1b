//! KEDA's external scaler (`externalscaler.ExternalScaler`, `proto/externalscaler.proto`) on the
//! gateway's gRPC listener, for `external` and `external-push` triggers. A trigger names its pool
//! in `scalerMetadata.pool` (default: the gateway's default pool).
//!
//! - `GetMetricSpec`: one metric, `gateway_pool_signal`, target 1 (the signal is in replicas).
//! - `GetMetrics`: the pool's signal (`metricValueFloat`; `metricValue` rounded up).
//! - `IsActive`: the pool has demand ([`Pool::has_demand`]: requests waiting or in flight at
//!   the gateway, or work its workers report queued).
//! - `StreamIsActive`: the current answer at once, then each change, checked whenever the
//!   signal is published and at once when a request starts waiting for a worker (the pool's
//!   `waiting` watch): a pool at zero is activated by its first request, not by a poll.
//! - `StreamMetricSpec`: the spec at once (it never changes), then the stream stays open.
//!
//! The two streams stay open for as long as KEDA watches; at most [`MAX_STREAMS`] are open at
//! once (RESOURCE_EXHAUSTED past it), so that a flood of them cannot take the scaler's memory;
//! and, as the listeners' per-address cap, under pressure only: once no more places are free
//! than one address's share (a quarter), an address holding that share already is refused, so
//! that one flooding address cannot take the last places from KEDA's own stream.
//! A stream sends its next message only once hyper has taken the last (the peer's window had
//! room): a peer that does not read holds one message a stream, no more.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt, stream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{Request, Response, Status};

use crate::pool::{Pool, Pools};

/// The code generated from KEDA's protocol.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub(crate) mod pb {
    tonic::include_proto!("externalscaler");
}

use pb::external_scaler_server::ExternalScaler;
use pb::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec, MetricValue,
    ScaledObjectRef,
};

/// The signal's metric name (as the external metrics API serves it).
pub(crate) const METRIC: &str = "gateway_pool_signal";

type Streamed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Most streams (`StreamIsActive`, `StreamMetricSpec`) open at once. KEDA keeps one a
/// trigger of an `external-push` ScaledObject (one operator, or a few in HA): far fewer.
pub(crate) const MAX_STREAMS: usize = 1024;

/// The scaler: every pool.
#[derive(Clone)]
pub(crate) struct Scaler {
    pub(crate) pools: Arc<Pools>,
    streams: Arc<Semaphore>,
    /// One address's share of the streams, under pressure.
    share: usize,
    /// Streams open by each peer address (those the listener names; none in direct calls).
    by_address: Counts,
}

/// Streams open by each peer address.
type Counts = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A stream's place, and its address's count, given back when the stream is dropped.
struct Place {
    _permit: OwnedSemaphorePermit,
    address: Option<(IpAddr, Counts)>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some((ip, counts)) = &self.address {
            let mut counts = counts.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(n) = counts.get_mut(ip) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(ip);
                }
            }
        }
    }
}

impl Scaler {
    pub(crate) fn new(pools: Arc<Pools>) -> Self {
        Self::with_streams(pools, MAX_STREAMS)
    }

    fn with_streams(pools: Arc<Pools>, streams: usize) -> Self {
        Self {
            pools,
            streams: Arc::new(Semaphore::new(streams)),
            share: (streams / 4).max(1),
            by_address: Arc::default(),
        }
    }

    /// A place for one more stream from `peer`, held until the stream is dropped.
    fn stream_place(&self, peer: Option<IpAddr>) -> Result<Place, Status> {
        let mut counts = self.by_address.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ip) = peer
            && self.streams.available_permits() <= self.share
            && counts.get(&ip).is_some_and(|&n| n >= self.share)
        {
            return Err(Status::resource_exhausted(format!(
                "this address holds {} scaler streams and few places are left; retry later",
                self.share
            )));
        }
        let permit = Arc::clone(&self.streams).try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!("{MAX_STREAMS} scaler streams are open already; retry later"))
        })?;
        let address = peer.map(|ip| {
            *counts.entry(ip).or_default() += 1;
            (ip, Arc::clone(&self.by_address))
        });
        Ok(Place { _permit: permit, address })
    }

    fn pool(&self, r: &ScaledObjectRef) -> Result<Arc<Pool>, Status> {
        let default = &self.pools.ctx().config.default_pool;
        let name = r.scaler_metadata.get("pool").filter(|p| !p.is_empty()).unwrap_or(default);
        self.pools.get(name).ok_or_else(|| Status::not_found(format!("no pool named {name:?}")))
    }
}

/// The call's peer address, as the listener put it in the call (`grpc::server`).
fn peer<T>(req: &Request<T>) -> Option<IpAddr> {
    req.remote_addr().map(|a| a.ip())
}

fn spec() -> GetMetricSpecResponse {
    GetMetricSpecResponse {
        metric_specs: vec![MetricSpec { metric_name: METRIC.to_owned(), target_size: 1, target_size_float: 1.0 }],
    }
}

/// The pool's activity: the current answer at once, then each change.
fn activity(pool: Arc<Pool>) -> impl Stream<Item = bool> + Send {
    let (signal, waiting) = (pool.signal(), pool.waiting());
    stream::unfold((pool, signal, waiting, None::<bool>), |(pool, mut signal, mut waiting, last)| async move {
        loop {
            let now = pool.has_demand();
            if last != Some(now) {
                return Some((now, (pool, signal, waiting, Some(now))));
            }
            tokio::select! {
                r = signal.changed() => r.ok()?,
                r = waiting.changed() => r.ok()?,
            }
        }
    })
}

#[tonic::async_trait]
impl ExternalScaler for Scaler {
    async fn is_active(&self, req: Request<ScaledObjectRef>) -> Result<Response<IsActiveResponse>, Status> {
        let pool = self.pool(req.get_ref())?;
        Ok(Response::new(IsActiveResponse { result: pool.has_demand() }))
    }

    type StreamIsActiveStream = Streamed<IsActiveResponse>;

    async fn stream_is_active(
        &self,
        req: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let pool = self.pool(req.get_ref())?;
        let place = self.stream_place(peer(&req))?;
        let s = activity(pool).map(move |result| {
            let _held = &place;
            Ok(IsActiveResponse { result })
        });
        Ok(Response::new(Box::pin(s)))
    }

    async fn get_metric_spec(&self, req: Request<ScaledObjectRef>) -> Result<Response<GetMetricSpecResponse>, Status> {
        self.pool(req.get_ref())?;
        Ok(Response::new(spec()))
    }

    async fn get_metrics(&self, req: Request<GetMetricsRequest>) -> Result<Response<GetMetricsResponse>, Status> {
        let r = req.into_inner();
        let pool = self.pool(&r.scaled_object_ref.unwrap_or_default())?;
        let signal = pool.signal().borrow().signal;
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name: METRIC.to_owned(),
                metric_value: signal.ceil() as i64,
                metric_value_float: signal,
            }],
        }))
    }

    type StreamMetricSpecStream = Streamed<GetMetricSpecResponse>;

    async fn stream_metric_spec(
        &self,
        req: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        self.pool(req.get_ref())?;
        let place = self.stream_place(peer(&req))?;
        let s = stream::once(async { Ok(spec()) }).chain(stream::pending()).map(move |m| {
            let _held = &place;
            m
        });
        Ok(Response::new(Box::pin(s)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ctx::Ctx;

    fn scaler() -> (Scaler, Arc<Pool>) {
        let pools = Pools::new(Arc::new(Ctx::for_tests(|_| {})), Default::default());
        let pool = pools.ensure("default");
        pools.ensure("big");
        (Scaler::new(pools), pool)
    }

    fn by(pool: &str) -> ScaledObjectRef {
        let scaler_metadata = [("pool".to_owned(), pool.to_owned())].into();
        ScaledObjectRef { name: "so".into(), namespace: "ns".into(), scaler_metadata }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_request_activates_the_stream_at_once() {
        let (s, pool) = scaler();
        let mut active = s.stream_is_active(Request::new(ScaledObjectRef::default())).await.unwrap().into_inner();
        assert!(!active.next().await.unwrap().unwrap().result, "idle: the current value at once");
        // A request waits for a worker (the pool has none): the next message comes before any
        // signal tick or poll.
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.wait_for_worker(Duration::from_secs(60), |_| None).await.is_none() })
        };
        let next = tokio::time::timeout(Duration::from_millis(1), active.next()).await;
        assert!(next.expect("no poll interval waited").unwrap().unwrap().result);
        assert!(s.is_active(Request::new(by("default"))).await.unwrap().into_inner().result);
        assert!(!s.is_active(Request::new(by("big"))).await.unwrap().into_inner().result, "pools are apart");
        waiter.abort();
    }

    #[tokio::test]
    async fn metrics_and_specs_name_the_signal() {
        let (s, pool) = scaler();
        pool.publish_signal(crate::PoolSignal { signal: 2.5, ..Default::default() });
        let req = GetMetricsRequest { scaled_object_ref: Some(by("default")), metric_name: METRIC.into() };
        let v = s.get_metrics(Request::new(req)).await.unwrap().into_inner().metric_values;
        assert_eq!((v[0].metric_name.as_str(), v[0].metric_value_float, v[0].metric_value), (METRIC, 2.5, 3));
        let spec = s.get_metric_spec(Request::new(by("big"))).await.unwrap().into_inner();
        assert_eq!(spec.metric_specs[0].target_size_float, 1.0);
        let mut streamed = s.stream_metric_spec(Request::new(by("big"))).await.unwrap().into_inner();
        assert_eq!(streamed.next().await.unwrap().unwrap(), spec);
        let e = s.get_metric_spec(Request::new(by("ghost"))).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
    }

    #[tokio::test]
    async fn streams_past_the_bound_are_refused_and_a_closed_one_frees_its_place() {
        let pools = Pools::new(Arc::new(Ctx::for_tests(|_| {})), Default::default());
        pools.ensure("default");
        let s = Scaler::with_streams(pools, 2);
        let first = s.stream_is_active(Request::new(by("default"))).await.unwrap().into_inner();
        let _second = s.stream_metric_spec(Request::new(by("default"))).await.unwrap().into_inner();
        let e = s.stream_is_active(Request::new(by("default"))).await.err().expect("past the bound");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(s.is_active(Request::new(by("default"))).await.is_ok(), "the unary calls are not bounded");
        drop(first);
        assert!(s.stream_is_active(Request::new(by("default"))).await.is_ok(), "a place came back");
    }

    fn from(ip: &str) -> Request<ScaledObjectRef> {
        let mut r = Request::new(by("default"));
        let remote_addr = Some(std::net::SocketAddr::new(ip.parse().unwrap(), 40000));
        r.extensions_mut().insert(tonic::transport::server::TcpConnectInfo { local_addr: None, remote_addr });
        r
    }

    #[tokio::test]
    async fn under_pressure_one_address_cannot_take_the_last_places() {
        let pools = Pools::new(Arc::new(Ctx::for_tests(|_| {})), Default::default());
        pools.ensure("default");
        // 8 places, a share of 2: one address may hold 6 while more than 2 are free.
        let s = Scaler::with_streams(pools, 8);
        let mut flood = Vec::new();
        for _ in 0..6 {
            flood.push(s.stream_is_active(from("10.0.0.9")).await.unwrap().into_inner());
        }
        let e = s.stream_is_active(from("10.0.0.9")).await.err().expect("the flooding address is refused");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        // KEDA, from another address, still gets the places left.
        let keda = [s.stream_is_active(from("10.0.0.1")).await, s.stream_is_active(from("10.0.0.1")).await];
        assert!(keda.iter().all(Result::is_ok));
        // The flood's streams end: its address's count goes with them.
        drop(flood);
        assert!(s.by_address.lock().unwrap().get(&"10.0.0.9".parse::<IpAddr>().unwrap()).is_none());
        assert!(s.stream_is_active(from("10.0.0.9")).await.is_ok());
    }
}
