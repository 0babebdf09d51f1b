//! Connection threads (`Server::connection_threads`): every connection is served on one of them,
//! stays on it, goes to the least loaded, and the drain and the cap work as without them.
//!
//! The connection threads run their own runtimes, on the real clock: these tests cannot pause
//! time, and keep their waits short.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{Client, Closed, config, get};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use listener::{Config, ConnectionThreads, Metrics, Server};
use tokio::sync::oneshot;

/// A listener on connection threads named `conn-N`, whose service answers with the name of the
/// thread it ran on (after `?ms=N` milliseconds).
struct Running {
    addr: std::net::SocketAddr,
    metrics: Metrics,
    threads: Arc<ConnectionThreads>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(config: Config, n: usize) -> Running {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let metrics = Metrics::default();
    let threads = Arc::new(ConnectionThreads::start(n, "conn").unwrap());
    let server = Server::new(tcp, config, metrics.clone()).connection_threads(Arc::clone(&threads));
    let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
        let ms = req.uri().query().and_then(|q| q.strip_prefix("ms=")).and_then(|v| v.parse().ok()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let name = std::thread::current().name().unwrap_or("?").to_owned();
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(name))))
    });
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(service, async {
        let _ = rx.await;
    }));
    Running { addr, metrics, threads, stop: Some(tx), task }
}

async fn thread_of(c: &mut Client, path: &str) -> String {
    c.send(&get(path)).await;
    let a = c.answer().await;
    assert_eq!(a.status, StatusCode::OK);
    String::from_utf8(a.body.to_vec()).unwrap()
}

#[tokio::test]
async fn connections_are_spread_over_the_threads_and_each_stays_on_its_own() {
    let srv = start(config(), 3).await;
    let mut clients = Vec::new();
    for _ in 0..12 {
        let mut c = Client::connect(srv.addr).await;
        let first = thread_of(&mut c, "/").await;
        assert!(first.starts_with("conn-"), "served on {first}, not a connection thread");
        // Every later request of the connection runs on the same thread.
        for _ in 0..4 {
            assert_eq!(thread_of(&mut c, "/").await, first);
        }
        clients.push((c, first));
    }
    // Each new connection went to the thread holding the fewest: 4 each.
    assert_eq!(srv.threads.open(), [4, 4, 4]);
    let mut per_thread = std::collections::BTreeMap::<String, usize>::new();
    for (_, t) in &clients {
        *per_thread.entry(t.clone()).or_default() += 1;
    }
    assert_eq!(per_thread.values().copied().collect::<Vec<_>>(), [4, 4, 4], "{per_thread:?}");

    // Closed connections are counted off their thread.
    drop(clients);
    common::until("the threads hold no connection", Duration::from_secs(5), || srv.threads.open() == [0, 0, 0]).await;
    common::until("the gauge is back to 0", Duration::from_secs(5), || srv.metrics.connections_open() == 0).await;
}

#[tokio::test]
async fn the_drain_answers_requests_in_progress_on_the_connection_threads_and_closes_idle_ones() {
    let mut srv = start(config(), 2).await;
    let mut busy = Vec::new();
    for _ in 0..4 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/?ms=300")).await;
        busy.push(c);
    }
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut c = Client::connect(srv.addr).await;
        thread_of(&mut c, "/").await;
        idle.push(c);
    }
    common::until("all open", Duration::from_secs(5), || srv.metrics.connections_open() == 8).await;

    srv.stop.take().unwrap().send(()).unwrap();
    for c in &mut idle {
        assert_eq!(c.closed_within(Duration::from_secs(2)).await, Closed::Closed);
        assert!(c.pending().is_empty());
    }
    for mut c in busy {
        let a = c.answer_within(Duration::from_secs(5)).await.expect("answered during the drain");
        assert_eq!(a.status, StatusCode::OK);
        assert!(a.body.starts_with(b"conn-"));
        assert_eq!(a.header("connection"), Some("close"));
        assert_eq!(c.closed_within(Duration::from_secs(5)).await, Closed::Closed);
    }
    tokio::time::timeout(Duration::from_secs(5), &mut srv.task).await.expect("serve returned").unwrap();
    assert!(tokio::net::TcpStream::connect(srv.addr).await.is_err());
    // Counted off their thread just after they gave their place under the cap back.
    common::until("the threads hold no connection", Duration::from_secs(5), || srv.threads.open() == [0, 0]).await;

    // Dropping the last handle stops and joins the threads (off the runtime: it blocks).
    let threads = srv.threads;
    tokio::task::spawn_blocking(move || drop(threads)).await.unwrap();
}

#[tokio::test]
async fn at_the_cap_an_idle_connection_makes_room_for_a_new_one_on_the_connection_threads() {
    let mut config = config();
    config.max_connections = 2;
    let srv = start(config, 2).await;
    let mut a = Client::connect(srv.addr).await;
    thread_of(&mut a, "/").await;
    let mut b = Client::connect(srv.addr).await;
    thread_of(&mut b, "/").await;
    // The third is admitted once the longest idle one is evicted, and served on a thread.
    let mut c = Client::connect(srv.addr).await;
    assert!(thread_of(&mut c, "/").await.starts_with("conn-"));
    assert_eq!(a.closed_within(Duration::from_secs(2)).await, Closed::Closed);
}
