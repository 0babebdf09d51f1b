//! The six connection-hygiene flags, defined once for both binaries, and the [`Config`] they
//! make.
//!
//! Each binary flattens [`ListenerArgs`] into its own clap struct. The environment variables
//! carry that binary's prefix, like every other flag of it (`GATEWAY_IDLE_TIMEOUT` for the
//! gateway, `WORKER_IDLE_TIMEOUT` for the worker): an operator who sets `GATEWAY_*` variables
//! expects these to be `GATEWAY_*` too, and one shared name (`LISTENER_*`) set for one binary
//! would silently apply to the other in a shared environment. The prefix is a type parameter
//! ([`GatewayEnv`], [`WorkerEnv`]) because clap needs the names at compile time.

use std::marker::PhantomData;
use std::time::Duration;

/// Default of `--header-read-timeout`.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `--body-read-timeout`.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `--idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);
/// Default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default of `--max-buffered-body-bytes`.
pub const DEFAULT_MAX_BUFFERED_BODY_BYTES: usize = 64 << 20;

/// Longest request head (request line and header lines) accepted: 32 KiB, what nginx accepts
/// with its default `large_client_header_buffers 4 8k`. Longer heads are answered 431.
pub const MAX_HEAD_BYTES: usize = 32 << 10;
/// Longest request target accepted: 8 KiB, nginx's default for a request line. Longer ones are
/// answered 414.
pub const MAX_URI_BYTES: usize = 8 << 10;
/// Most header lines accepted (hyper's fixed default, as Envoy's `max_headers_count`). More are
/// answered 431.
pub const MAX_HEADERS: usize = 100;

/// The environment variable names of the flags, one implementation per binary, and the one
/// default that differs between the binaries.
pub trait EnvNames: Clone + Send + Sync + 'static {
    const HEADER_READ_TIMEOUT: &'static str;
    const BODY_READ_TIMEOUT: &'static str;
    const IDLE_TIMEOUT: &'static str;
    const MAX_CONNECTIONS: &'static str;
    const MAX_CONNECTIONS_PER_ADDRESS: &'static str;
    const MAX_BUFFERED_BODY_BYTES: &'static str;
    /// Without `--max-connections-per-address`, one address may hold `--max-connections`
    /// divided by this: 4 for the gateway (its clients are many), 1 for the worker (its clients
    /// are gateways, each of which opens up to its `--max-outstanding` connections from one
    /// address).
    const ADDRESS_SHARE: usize;
}

macro_rules! env_names {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $share:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $name;
        impl EnvNames for $name {
            const HEADER_READ_TIMEOUT: &'static str = concat!($prefix, "HEADER_READ_TIMEOUT");
            const BODY_READ_TIMEOUT: &'static str = concat!($prefix, "BODY_READ_TIMEOUT");
            const IDLE_TIMEOUT: &'static str = concat!($prefix, "IDLE_TIMEOUT");
            const MAX_CONNECTIONS: &'static str = concat!($prefix, "MAX_CONNECTIONS");
            const MAX_CONNECTIONS_PER_ADDRESS: &'static str = concat!($prefix, "MAX_CONNECTIONS_PER_ADDRESS");
            const MAX_BUFFERED_BODY_BYTES: &'static str = concat!($prefix, "MAX_BUFFERED_BODY_BYTES");
            const ADDRESS_SHARE: usize = $share;
        }
    };
}

env_names!(
    /// `GATEWAY_HEADER_READ_TIMEOUT`, `GATEWAY_BODY_READ_TIMEOUT`, ...
    GatewayEnv,
    "GATEWAY_",
    4
);
env_names!(
    /// `WORKER_HEADER_READ_TIMEOUT`, `WORKER_BODY_READ_TIMEOUT`, ...
    WorkerEnv,
    "WORKER_",
    1
);

/// Connection hygiene of the client port (`#[command(flatten)]` into the binary's config).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Connections")]
pub struct ListenerArgs<E: EnvNames> {
    /// Longest a client may take to send a request head (request line and headers), counted
    /// from its first byte, or from the connection's opening for its first request. Past it the
    /// connection is answered 408 and closed (nginx `client_header_timeout`, Envoy
    /// `request_headers_timeout`).
    #[arg(long, env = E::HEADER_READ_TIMEOUT, default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,

    /// Longest a client may take to send a whole request body, counted from when the server
    /// starts reading it. A deadline, not a minimum rate: it bounds how long any request can
    /// hold buffered bytes or wait for admission, whatever it trickles. Past it the request is
    /// answered 408 and the connection closed.
    #[arg(long, env = E::BODY_READ_TIMEOUT, default_value = "30s", value_parser = parse_duration)]
    pub body_read_timeout: Duration,

    /// Longest a keep-alive connection may stay open with no request after its last answer
    /// (or with an answer the client does not read). Then it is closed without an answer, as
    /// nginx's `keepalive_timeout` (also 75s) does. Keep it above the idle timeout of the
    /// clients' connection pools (the gateway's to its workers is 60s).
    #[arg(long, env = E::IDLE_TIMEOUT, default_value = "75s", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Most client connections open at once. At the cap, idle keep-alive connections are
    /// closed to make room (oldest first); when none is idle, a new connection is answered 503
    /// `overloaded` with `Retry-After` and closed. Clamped to half the process's file
    /// descriptor limit (raised to its hard limit at start).
    #[arg(long, env = E::MAX_CONNECTIONS, default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = parse_count)]
    pub max_connections: usize,

    /// One address's share of `--max-connections` (one /64 for IPv6: a host has the whole
    /// prefix), held under pressure only, so that one address cannot fill the cap and lock the
    /// others out (nginx `limit_conn`, HAProxy `src_conn_cur`): while more places are free than
    /// this, any address may open more (one load generator, or the clients behind a source NAT,
    /// is served while the listener has room); once no more are free, a new connection from an
    /// address holding this many is answered 503 `overloaded` with `Retry-After` and closed, and
    /// the places left are the other addresses'. Unset: the gateway's share is a quarter of
    /// `--max-connections`, the worker's all of it (its clients are gateways, one address each).
    #[arg(long, env = E::MAX_CONNECTIONS_PER_ADDRESS, value_parser = parse_count)]
    pub max_connections_per_address: Option<usize>,

    /// Most bytes of request bodies held in memory at once, over all connections (bodies being
    /// received and bodies of requests not yet answered). A body that would pass it is
    /// answered 503 `overloaded` with `Retry-After`; bodies over 64 KiB may use only three
    /// quarters of it, so that large bodies cannot starve small ones.
    #[arg(long, env = E::MAX_BUFFERED_BODY_BYTES, default_value_t = DEFAULT_MAX_BUFFERED_BODY_BYTES, value_parser = parse_count)]
    pub max_buffered_body_bytes: usize,

    #[arg(skip)]
    _env: PhantomData<E>,
}

impl<E: EnvNames> Default for ListenerArgs<E> {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: None,
            max_buffered_body_bytes: DEFAULT_MAX_BUFFERED_BODY_BYTES,
            _env: PhantomData,
        }
    }
}

impl<E: EnvNames> ListenerArgs<E> {
    /// The listener configuration these flags describe, with the other settings at their
    /// defaults.
    pub fn config(&self) -> Config {
        Config {
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
            max_connections_per_address: self
                .max_connections_per_address
                .unwrap_or(self.max_connections / E::ADDRESS_SHARE)
                .clamp(1, self.max_connections),
            max_buffered_body_bytes: self.max_buffered_body_bytes,
            ..Config::default()
        }
    }
}

/// Everything the listener needs; [`ListenerArgs::config`] fills the flag-backed fields.
#[derive(Debug, Clone)]
pub struct Config {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Most connections from one address (IPv6: one /64); at most `max_connections`.
    pub max_connections_per_address: usize,
    pub max_buffered_body_bytes: usize,
    /// After shutdown is asked for, how long requests already received may take before the
    /// remaining connections are closed anyway.
    pub drain_timeout: Duration,
    /// `Retry-After` (seconds) of the 503 answered at the connection cap.
    pub retry_after_s: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS,
            max_buffered_body_bytes: DEFAULT_MAX_BUFFERED_BODY_BYTES,
            drain_timeout: Duration::from_secs(30),
            retry_after_s: 1,
        }
    }
}

/// The project's one duration syntax (`250ms`, `10s`, `2m`, `1h 30m`), via `humantime`; zero is
/// refused (every limit here must be able to fire).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| format!("{e} (write e.g. 250ms, 10s, 2m)"))?;
    if d.is_zero() {
        return Err("must be more than zero".to_owned());
    }
    Ok(d)
}

fn parse_count(s: &str) -> Result<usize, String> {
    let n: usize = s.trim().parse().map_err(|e| format!("{e}"))?;
    if n == 0 {
        return Err("must be more than zero".to_owned());
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Gw {
        #[command(flatten)]
        listener: ListenerArgs<GatewayEnv>,
    }

    #[test]
    fn defaults_and_durations_parse() {
        let a = Gw::try_parse_from(["gw"]).unwrap().listener;
        assert_eq!(a.header_read_timeout, DEFAULT_HEADER_READ_TIMEOUT);
        assert_eq!(a.idle_timeout, Duration::from_secs(75));
        let a = Gw::try_parse_from(["gw", "--header-read-timeout", "250ms", "--idle-timeout", "2m"]).unwrap().listener;
        assert_eq!(a.header_read_timeout, Duration::from_millis(250));
        assert_eq!(a.idle_timeout, Duration::from_secs(120));
    }

    #[test]
    fn the_per_address_cap_defaults_to_a_share_of_the_cap_and_never_exceeds_it() {
        let a = Gw::try_parse_from(["gw"]).unwrap().listener.config();
        assert_eq!(a.max_connections_per_address, DEFAULT_MAX_CONNECTIONS / 4);
        let a = Gw::try_parse_from(["gw", "--max-connections", "100", "--max-connections-per-address", "500"]);
        assert_eq!(a.unwrap().listener.config().max_connections_per_address, 100);
        let w = ListenerArgs::<WorkerEnv>::default().config();
        assert_eq!(w.max_connections_per_address, DEFAULT_MAX_CONNECTIONS, "a worker's clients are gateways");
    }

    #[test]
    fn zero_and_garbage_are_refused() {
        assert!(Gw::try_parse_from(["gw", "--body-read-timeout", "0s"]).is_err());
        assert!(Gw::try_parse_from(["gw", "--body-read-timeout", "10"]).is_err());
        assert!(Gw::try_parse_from(["gw", "--max-connections", "0"]).is_err());
    }

    #[test]
    fn help_names_the_binarys_env_vars() {
        use clap::CommandFactory;
        let help = Gw::command().render_long_help().to_string();
        assert!(help.contains("GATEWAY_HEADER_READ_TIMEOUT"), "{help}");
        assert!(help.contains("GATEWAY_MAX_BUFFERED_BODY_BYTES"), "{help}");
        assert_eq!(WorkerEnv::IDLE_TIMEOUT, "WORKER_IDLE_TIMEOUT");
    }
}
