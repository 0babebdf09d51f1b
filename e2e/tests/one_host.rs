//! One client host holding thousands of keep-alive connections (a load generator, or an ingress
//! behind source NAT) is served while the gateway's listener has room (issue 48): the
//! per-address share (`--max-connections-per-address`, a quarter of the cap: 2,500) holds under
//! pressure only. Before, such a host met 503s beyond 2,500 connections. The hostile-address
//! cases (`address_flood.rs`) check that a flood from one address still costs others nothing.
//! Alone: `cargo build -p worker -p gateway --example fake_worker && cargo test -p e2e --test one_host`.

use std::sync::Arc;
use std::time::Duration;

use testkit::Server;
use testkit::fault::{authority, metric_sum, read_answer};
use testkit::http::{client, get};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::process::Command;
use tokio::sync::Semaphore;

/// Connections the host holds at once: more than twice the default per-address share.
const CONNECTIONS: usize = 6_000;
/// Requests in flight at once while they open (the worker's own admission is beside the point).
const IN_FLIGHT: usize = 128;

const REQUEST: &[u8] = b"GET /predict?query=play%20some%20jazz HTTP/1.1\r\nhost: gateway\r\n\r\n";

/// The soft open-file limit raised to the hard one: thousands of sockets.
fn raise_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// One request on `s`, its answer's status (or what went wrong).
async fn exchange(s: &mut TcpStream) -> Result<u16, String> {
    s.write_all(REQUEST).await.map_err(|e| e.to_string())?;
    let mut pending = Vec::new();
    read_answer(s, &mut pending).await.map(|a| a.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_host_with_6000_keep_alive_connections_is_served_while_the_listener_has_room() {
    raise_nofile();
    use nix::sys::resource::{Resource, getrlimit};
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    // The gateway allows half its file limit as connections (it raises its own to the hard one).
    assert!(soft >= 2 * CONNECTIONS as u64 + 1_000, "this host's open-file limit {soft} is too low for the case");
    let worker = Server::fake_worker(&["--calibration-time", "0s"]).await;
    let mut cmd = Command::new(testkit::bin("gateway"));
    cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--stats-interval", "100ms"]);
    cmd.arg("--worker").arg(&worker.url).env("RUST_LOG", "warn");
    let gw = Server::start(cmd).await;
    let admin = gw.announced("admin", Duration::from_secs(2)).await.expect("the admin port");
    let c = client();
    testkit::wait_until(Duration::from_secs(10), "the gateway is ready", || async {
        get(&c, &format!("{}/readyz", gw.url)).await.status == 200
    })
    .await;

    // Every connection from 127.0.0.1 opens, sends its request, is answered and stays open.
    let to = authority(&gw.url).to_owned();
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let (to, permits) = (to.clone(), Arc::clone(&permits));
        opening.spawn(async move {
            let _p = permits.acquire_owned().await.unwrap();
            let mut s = TcpStream::connect(&to).await.map_err(|e| e.to_string())?;
            let status = exchange(&mut s).await?;
            Ok::<_, String>((s, status))
        });
    }
    let mut held = Vec::with_capacity(CONNECTIONS);
    let mut bad = Vec::new();
    while let Some(r) = opening.join_next().await {
        match r.unwrap() {
            Ok((s, 200)) => held.push(s),
            Ok((_, status)) => bad.push(format!("HTTP {status}")),
            Err(e) => bad.push(e),
        }
    }
    assert!(bad.is_empty(), "{} of {CONNECTIONS} not answered 200: {:?}", bad.len(), &bad[..bad.len().min(5)]);
    let m = get(&c, &format!("{admin}/metrics")).await.body.as_str().unwrap_or_default().to_owned();
    assert_eq!(metric_sum(&m, "gateway_connections_refused_per_address_total", &[]), 0.0);
    assert!(metric_sum(&m, "gateway_connections_open", &[]) >= CONNECTIONS as f64, "the host holds them all:\n{m}");

    // Held together, they are kept alive: a second request on every tenth is served on it.
    for s in held.iter_mut().step_by(10) {
        assert_eq!(exchange(s).await, Ok(200), "a kept connection");
    }
}
