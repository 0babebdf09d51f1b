//! `--max-buffered-body-bytes` under a flood of nearly complete large bodies: the bytes held stay
//! under the budget, every other flood connection is answered 503, small requests keep being
//! served, and the memory comes back after the flood (this binary uses mimalloc, as the gateway
//! does). Real clock: it measures memory.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{Client, config, post, start, until};
use http::StatusCode;
use listener::Config;
use tokio::io::AsyncWriteExt;
use wire::ErrorType;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BUDGET: usize = 32 << 20;
const FLOOD: usize = 96;
const BODY: usize = 1 << 20;

/// Resident memory of this process, bytes.
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Sends a head declaring [`BODY`] bytes and all of them but the last, from a small static
/// buffer (the clients live in this process too: they must not hold the flood's memory).
async fn nearly_complete(c: &mut Client) {
    static CHUNK: [u8; 64 << 10] = [b'b'; 64 << 10];
    let head = format!("POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: {BODY}\r\n\r\n");
    if c.stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let mut left = BODY - 1;
    while left > 0 {
        let n = left.min(CHUNK.len());
        // A refused connection is closed after its 503: stop sending.
        if c.stream.write_all(&CHUNK[..n]).await.is_err() {
            return;
        }
        left -= n;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_nearly_complete_large_bodies_holds_at_most_the_budget_and_gives_it_back() {
    let srv = start(Config {
        max_buffered_body_bytes: BUDGET,
        // This test is about bytes: no timeout may end a flood connection.
        header_read_timeout: Duration::from_secs(60),
        body_read_timeout: Duration::from_secs(60),
        ..config()
    })
    .await;
    for _ in 0..20 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&post("/echo", &[b'w'; 4096])).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
    }
    let before = rss();

    // Sample the bytes held while the flood runs.
    let peak_held = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (bodies, peak, stop) = (srv.bodies.clone(), Arc::clone(&peak_held), Arc::clone(&stop));
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(bodies.buffered_bytes(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };

    let mut flood = Vec::new();
    for _ in 0..FLOOD {
        let addr = srv.addr;
        flood.push(tokio::spawn(async move {
            let mut c = Client::connect(addr).await;
            nearly_complete(&mut c).await;
            c
        }));
    }
    let mut clients = Vec::new();
    for f in flood {
        clients.push(f.await.unwrap());
    }
    // Every flood connection is either holding its body (exactly its declared length: the
    // buffer grew to it) or was refused.
    let refused = || srv.metrics.body_errors(ErrorType::Overloaded) as usize;
    until("every flood body held or refused", Duration::from_secs(30), || {
        refused() + srv.bodies.buffered_bytes() / BODY == FLOOD
    })
    .await;
    let held_bytes = srv.bodies.buffered_bytes();
    assert!(held_bytes <= BUDGET / 4 * 3, "large bodies hold {held_bytes} bytes, budget {BUDGET}");
    // The refused ones read a 503 JSON with Retry-After.
    let answers =
        futures::future::join_all(clients.iter_mut().map(|c| c.answer_within(Duration::from_millis(500)))).await;
    let answered: Vec<_> = answers.into_iter().flatten().collect();
    assert_eq!(answered.len(), refused());
    for a in &answered {
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{a:?}");
        assert_eq!(a.error_type(), "overloaded");
        assert_eq!(a.header("retry-after"), Some("1"));
    }

    // Small requests are still served (the budget keeps a quarter for bodies up to 64 KiB).
    for _ in 0..50 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&post("/echo", b"{\"query\":\"play some jazz\"}")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
    }
    let during = rss();
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let peak = peak_held.load(Ordering::Relaxed);
    assert!(peak <= BUDGET, "held {peak} bytes at the peak, budget {BUDGET}");
    // Without the budget the flood would hold FLOOD x 1 MiB = 96 MiB; with it, 24 MiB of bodies
    // and the connections' own buffers.
    let grew = during.saturating_sub(before);
    assert!(grew < 48 << 20, "RSS grew {} MiB during the flood", grew >> 20);

    drop(clients);
    until("every body given back", Duration::from_secs(10), || srv.bodies.buffered_bytes() == 0).await;
    until("connections closed", Duration::from_secs(10), || srv.metrics.connections_open() == 0).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        // mimalloc returns freed pages to the OS lazily, as it allocates and frees again.
        let mut c = Client::connect(srv.addr).await;
        c.send(&post("/echo", b"x")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
        let after = rss();
        // The 24 MiB of bodies went back to the system; what stays is the allocator's cache of
        // small blocks (connection buffers, tasks).
        if after < before + (16 << 20) {
            println!("RSS before {} MiB, during {} MiB, after {} MiB", before >> 20, during >> 20, after >> 20);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "RSS stayed at {} MiB (before: {} MiB)",
            after >> 20,
            before >> 20
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
