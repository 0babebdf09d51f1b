//! The per-core runtime (`--runtime per-core`): one single-threaded tokio runtime per data-plane
//! core, as nginx's workers and pingora's `NoSteal` runtime, and one more for the control plane.
//!
//! On a work-stealing runtime a request's tasks wake each other across threads, and the state
//! they share moves between cores with every reference count and lock; one single-threaded
//! gateway per core keeps the one-core cost. Here each core's thread runs its own runtime with
//! its own listening socket of the client port and, if on, of the gRPC port, all bound to one
//! address with `SO_REUSEPORT` (`listener::bind_shared`): the kernel spreads connections over
//! them, and a connection is served by one thread from its accept to its close. The listeners'
//! limits stay the process's (`listener::Server::sibling`, `listener::h2::Listener::sibling`:
//! one connection cap, one per-address registry, one body budget). A core takes upstream
//! connections only from its own idle stack (`upstream::Upstream`, by `runtime::core`).
//!
//! The control plane runs on the thread that calls [`run_per_core`], a single-threaded runtime
//! of its own: discovery, the worker monitors, the signal task, admission's capacity follower,
//! the admin port and the metrics API. SIGTERM or SIGINT tells every core through a `watch`;
//! each stops accepting and drains as the shared runtime's listener does, and the process ends
//! when all have.

use std::io;
use std::thread;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::runtime::{Builder, Runtime};
use tokio::sync::watch;

use crate::{Config, Gateway, StartError, build, grpc, http, runtime, serve_operators};

/// Run the gateway on `--runtime-threads` single-threaded runtimes, one a core, and the control
/// plane on this thread, until SIGTERM or Ctrl-C; then finish the requests in flight on every
/// core. Ports are announced as [`crate::run`] announces them.
pub fn run_per_core(config: Config) -> Result<(), StartError> {
    let cores = config.runtime_threads();
    let control = Builder::new_current_thread().enable_all().build()?;
    tracing::debug!(cores, "per-core runtime");
    control.block_on(run(config, cores))
}

async fn run(config: Config, cores: usize) -> Result<(), StartError> {
    let (listen, admin_listen, grpc_listen) = (config.listen, config.admin_listen, config.grpc_listen);
    // Before any port is announced (see `listener::stop_signal`).
    let stop = listener::stop_signal();
    let gateway = build(config).await?;
    let _api = serve_operators(&gateway, admin_listen).await?;
    let state = &gateway.state;
    let runtimes: Vec<Runtime> =
        (0..cores).map(|_| Builder::new_current_thread().enable_all().build()).collect::<io::Result<_>>()?;

    // gRPC (off unless --grpc-listen): bound and announced before the client port.
    let (tls, grpc) = match grpc_listen {
        Some(at) => {
            // Files read (and refused) before the port is announced.
            let tls = grpc::tls_config(&state.pools.ctx().config)?;
            let sockets = listener::bind_shared(at, cores)?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            println!("grpc listening on {scheme}://{}", sockets[0].local_addr()?);
            let incoming = in_each(&runtimes, sockets, |tcp, first: Option<&listener::h2::Listener>| match first {
                None => grpc::incoming(tcp, state),
                Some(first) => first.sibling(tcp),
            })?;
            (tls, incoming)
        }
        None => (None, Vec::new()),
    };
    let sockets = listener::bind_shared(listen, cores)?;
    let at = sockets[0].local_addr()?;
    let clients = in_each(&runtimes, sockets, |tcp, first: Option<&listener::Server>| match first {
        None => http::client_server(tcp, state),
        Some(first) => first.sibling(tcp),
    })?;
    println!("listening on http://{at}");

    let (stopping, stopped) = watch::channel(false);
    let drain = state.listener_config().drain_timeout;
    let mut grpc = grpc.into_iter();
    let mut threads = Vec::with_capacity(cores);
    for (index, (runtime, client)) in runtimes.into_iter().zip(clients).enumerate() {
        let core = Core { index, runtime, client, grpc: grpc.next(), tls: tls.clone() };
        let (gateway, stopped) = (gateway.clone(), stopped.clone());
        let thread = thread::Builder::new().name(format!("gateway-core-{index}"));
        threads.push(thread.spawn(move || core.run(&gateway, stopped, drain))?);
    }

    let signal = stop.await;
    tracing::info!(signal, "shutting down: finishing requests in flight");
    let _ = stopping.send(true);
    // Each core drains its connections; the process ends when all have (every thread joined,
    // even past one that panicked).
    let panicked =
        tokio::task::spawn_blocking(move || threads.into_iter().map(|t| t.join()).filter(Result::is_err).count()).await;
    if !matches!(panicked, Ok(0)) {
        tracing::error!("a core's thread panicked");
    }
    tracing::info!("gateway stopped");
    Ok(())
}

/// Each of `sockets` made a tokio listener in its core's runtime (registered with that
/// runtime's reactor, so that its core accepts on it), and `make` a server of it: the first on
/// its own, the others its siblings.
fn in_each<T>(
    runtimes: &[Runtime],
    sockets: Vec<std::net::TcpListener>,
    make: impl Fn(TcpListener, Option<&T>) -> T,
) -> io::Result<Vec<T>> {
    let mut made: Vec<T> = Vec::with_capacity(sockets.len());
    for (runtime, socket) in runtimes.iter().zip(sockets) {
        let _in = runtime.enter();
        let server = make(TcpListener::from_std(socket)?, made.first());
        made.push(server);
    }
    Ok(made)
}

/// One data-plane core: its runtime and its sockets' servers.
struct Core {
    index: usize,
    runtime: Runtime,
    client: listener::Server,
    grpc: Option<listener::h2::Listener>,
    tls: Option<std::sync::Arc<rustls::server::ServerConfig>>,
}

impl Core {
    /// Serve this core's ports on its thread until `stopped` says so, then drain them.
    fn run(self, gateway: &Gateway, stopped: watch::Receiver<bool>, drain: Duration) {
        runtime::set_core(self.index);
        let Self { runtime, client, grpc, tls, .. } = self;
        let state = &gateway.state;
        let stop = |mut stopped: watch::Receiver<bool>| async move {
            // A sender gone (the control plane ended) stops the core too.
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        runtime.block_on(async {
            let grpc =
                grpc.map(|incoming| tokio::spawn(grpc::serve_on(incoming, tls, state.clone(), stop(stopped.clone()))));
            if let Err(e) = http::serve_client_on(client, state.clone(), stop(stopped)).await {
                tracing::error!(error = %e, "client listener failed");
            }
            if let Some(grpc) = grpc {
                // KEDA's streams stay open by design: the calls in flight get the drain timeout.
                if tokio::time::timeout(drain, grpc).await.is_err() {
                    tracing::debug!("grpc drain timeout; closing the remaining calls");
                }
            }
        });
    }
}
