//! A small, fast HTTP/1.1 upstream for benchmarking load generators: answers every request with a
//! fixed small JSON body, after an optional fixed delay, on a single-threaded runtime. Prints
//! `listening on http://ADDR`.
//!
//! `GET /__stats` answers (and resets) how long requests were really held before their answer
//! (`{"count", "mean_ms", "p50_ms", "p99_ms", "max_ms"}`): tokio's timer has a 1 ms wheel, so a
//! `--delay 10ms` holds a request 10 to 11 ms; the load generators are judged against this.
//!
//! `cargo run --release -p loadtest --example upstream -- [--delay 10ms] [ADDR]`

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 35\r\n\r\n{\"intent\":\"PlayMusic\",\"score\":0.98}";

fn main() -> std::io::Result<()> {
    let mut addr = "127.0.0.1:0".to_owned();
    let mut delay = Duration::ZERO;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--delay" => {
                let v = args.next().unwrap_or_default();
                delay = loadtest::config::parse_duration(&v).map_err(std::io::Error::other)?;
            }
            other => addr = other.to_owned(),
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::bind(&addr).await?;
        println!("listening on http://{}", listener.local_addr()?);
        let held = Rc::new(RefCell::new(Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds")));
        loop {
            let (sock, _) = listener.accept().await?;
            let _ = sock.set_nodelay(true);
            tokio::task::spawn_local(serve(sock, delay, held.clone()));
        }
    })
}

async fn serve(mut sock: TcpStream, delay: Duration, held: Rc<RefCell<Histogram<u64>>>) {
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut out = Vec::with_capacity(4 * 1024);
    loop {
        // Answer every complete request in the buffer (pipelining works), then read more.
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            let len = match req.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) => break,
                Err(_) => return,
            };
            let body: usize = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() < len + body {
                break;
            }
            let stats = req.path == Some("/__stats");
            buf.advance(len + body);
            if stats {
                out.extend_from_slice(&stats_answer(&mut held.borrow_mut()));
                continue;
            }
            if !delay.is_zero() {
                let t = Instant::now();
                tokio::time::sleep(delay).await;
                let _ = held.borrow_mut().record(t.elapsed().as_micros().max(1) as u64);
            }
            out.extend_from_slice(OK);
        }
        if !out.is_empty() {
            if sock.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        match sock.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn stats_answer(h: &mut Histogram<u64>) -> Vec<u8> {
    let ms = |v: u64| v as f64 / 1e3;
    let body = format!(
        "{{\"count\":{},\"mean_ms\":{:.3},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3}}}",
        h.len(),
        h.mean() / 1e3,
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.99)),
        ms(h.max())
    );
    h.reset();
    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())
        .into_bytes()
}
