//! Out of file descriptors: the accept loop backs off instead of spinning, closes idle keep-alive
//! connections to get descriptors back, and serves the waiting client. (Its own test binary: it
//! lowers this process's open-file limit.)

mod common;

use std::time::Duration;

use common::{Client, Closed, config, get, start};
use http::StatusCode;
use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The highest file descriptor number open in this process.
fn highest_fd() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap()
}

/// Leaves no descriptor free (soft limit just above the highest open one, gaps filled) until
/// dropped.
struct NoDescriptors {
    fillers: Vec<std::fs::File>,
    soft: u64,
    hard: u64,
}

impl NoDescriptors {
    fn new() -> Self {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, highest_fd() + 1, hard).unwrap();
        let mut fillers = Vec::new();
        while let Ok(f) = std::fs::File::open("/dev/null") {
            fillers.push(f);
        }
        Self { fillers, soft, hard }
    }
}

impl Drop for NoDescriptors {
    fn drop(&mut self) {
        self.fillers.clear();
        setrlimit(Resource::RLIMIT_NOFILE, self.soft, self.hard).unwrap();
    }
}

/// A socket made now (while descriptors are free), connected later.
fn socket() -> socket2::Socket {
    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap()
}

async fn connect(s: socket2::Socket, addr: std::net::SocketAddr) -> Client {
    s.connect(&addr.into()).unwrap();
    s.set_nonblocking(true).unwrap();
    Client::from_stream(tokio::net::TcpStream::from_std(s.into()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_loop_backs_off_evicts_idle_connections_and_serves_again() {
    let srv = start(config()).await;

    // 1. Nothing to evict: the loop backs off (10 ms, doubling) while no descriptor is free,
    // then serves the waiting client once there is one.
    let (first, later) = (socket(), socket());
    let none = NoDescriptors::new();
    let mut c = connect(first, srv.addr).await;
    c.send(&get("/")).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let failed = srv.metrics.accept_errors();
    drop(none);
    assert_eq!(c.answer_within(Duration::from_secs(5)).await.map(|a| a.status), Some(StatusCode::OK));
    // 10 + 20 + 40 + 80 + 160 + 320 ms: about six failed accepts in 600 ms; a spinning loop
    // makes thousands.
    assert!((2..=12).contains(&failed), "{failed} failed accepts in 600 ms");

    // 2. Idle keep-alive connections are closed to get descriptors back.
    let mut idle = Vec::new();
    for _ in 0..20 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
        idle.push(c);
    }
    let before = srv.metrics.accept_errors();
    let none = NoDescriptors::new();
    let mut c = connect(later, srv.addr).await;
    c.send(&get("/")).await;
    let answer = c.answer_within(Duration::from_secs(5)).await;
    drop(none);
    assert_eq!(answer.map(|a| a.status), Some(StatusCode::OK));
    assert!(srv.metrics.accept_errors() > before);
    assert!(srv.metrics.connections_evicted() >= 1);
    // The oldest idle connection was among those closed, without an answer.
    assert_eq!(idle[0].closed_within(Duration::from_secs(1)).await, Closed::Closed);
    assert!(idle[0].pending().is_empty());
}
