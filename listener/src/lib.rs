//! The client-facing HTTP/1 listener of the gateway and the worker: connection hygiene as
//! production proxies have it. See `listener/README.md` for every limit, its default, and what a
//! client sees at it.
//!
//! - header-read, idle keep-alive and unread-answer timeouts on every connection (`phase.rs`
//!   holds the policy), with one timer per connection that no request touches;
//! - a body deadline, a per-request size limit and a process-wide budget of buffered body bytes,
//!   applied by [`BodyReader::collect`], whose [`Error`] maps to a JSON answer;
//! - a cap on open connections per client address (IPv6: per /64), and a cap on all of them
//!   that closes idle and head-pending connections of the addresses holding the most, then
//!   answers 503, and backs off on `EMFILE`;
//! - a drain that answers every request already received;
//! - JSON bodies on the listener's own answers (408, 414, 431, 503) and on hyper's answers to
//!   heads it cannot parse;
//! - [`Metrics`] under the binary's prefix, and the six flags as [`ListenerArgs`];
//! - the gRPC (HTTP/2) listeners of both binaries under the same limits ([`h2`]).
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use http_body_util::Full;
//! use hyper::body::{Bytes, Incoming};
//! use hyper::{Request, Response};
//!
//! let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let mut registry = prometheus_client::registry::Registry::default();
//! let metrics = listener::Metrics::register(&mut registry, "gateway");
//! let server = listener::Server::new(tcp, listener::Config::default(), metrics);
//! let bodies = server.bodies();
//! let service = hyper::service::service_fn(move |req: Request<Incoming>| {
//!     let bodies = bodies.clone();
//!     async move {
//!         Ok::<_, std::convert::Infallible>(match bodies.collect(req.into_body(), 1 << 20).await {
//!             Ok(body) => Response::new(Full::new(body)),
//!             Err(e) => e.response::<Full<Bytes>>(1),
//!         })
//!     }
//! });
//! server.serve(service, async { let _ = tokio::signal::ctrl_c().await; }).await;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod answer;
mod args;
mod bind;
mod body;
mod conn;
mod error;
pub mod exposition;
pub mod h2;
mod io;
mod metrics;
mod nofile;
mod phase;
mod registry;
mod server;
mod service;
pub mod shard;
mod signal;

pub use args::{
    Config, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BUFFERED_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, EnvNames, GatewayEnv, ListenerArgs, MAX_HEAD_BYTES,
    MAX_HEADERS, MAX_URI_BYTES, WorkerEnv, parse_duration,
};
pub use bind::{BACKLOG, bind, bind_shared};
pub use body::{BodyReader, LARGE_BODY_BYTES};
pub use error::Error;
pub use io::{LINGER_BYTES, LINGER_TIME};
pub use metrics::Metrics;
pub use nofile::raise_nofile_limit;
pub use phase::TimeoutKind;
pub use server::Server;
pub use signal::stop_signal;

/// The error type hyper and tower accept from services and bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
