//! Hostile workers behind the real gateway (issue 33): a worker answering HTML 500s with a stack
//! trace, HTML 200s, JSON 500s, or 8 MB answers, beside a real worker. Clients must get only
//! well-formed answers (here: all 200, the one retry going to the real worker), never a byte of
//! the hostile worker's text, and the gateway's memory must stay bounded and come back.
//!
//! The hostile worker is a small HTTP/1.1 server in this process: `/readyz` answers 200 (so the
//! gateway keeps sending it traffic after each ejection), `/v1/stats` 404 (a worker without stats
//! is routed, simply blind), `/predict` as its mode says. The real worker is the built `worker`
//! (the bundled CPU model); each case is bounded in seconds. Alone:
//! `cargo build -p worker -p gateway && cargo test -p e2e --test hostile_workers`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use testkit::Server;
use testkit::fault::{gateway_cmd, metric_sum, rss_bytes, worker_cmd};
use testkit::http::{Answer, client, get};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One case at a time: each loads both cores of a small machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const QUERY: &str = "/predict?query=play%20some%20jazz%20music";
/// What the hostile worker leaks if its text reaches a client.
const SECRET: &str = "/srv/secret";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Mode {
    Html500 = 0,
    Html200 = 1,
    Json500 = 2,
    /// 8 MB of JSON-looking bytes, delimited by the end of the connection.
    HugeUntilClose = 3,
    /// 8 MB declared by `Content-Length`.
    HugeLength = 4,
}

const HUGE: usize = 8 << 20;

/// The hostile worker: its address, its mode (switchable), and how many `/predict` it answered.
struct Hostile {
    url: String,
    mode: Arc<AtomicU8>,
    predicts: Arc<AtomicU64>,
}

impl Hostile {
    async fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (mode, predicts) = (Arc::new(AtomicU8::new(mode as u8)), Arc::new(AtomicU64::new(0)));
        let (m, p) = (Arc::clone(&mode), Arc::clone(&predicts));
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, Arc::clone(&m), Arc::clone(&p)));
            }
        });
        Self { url, mode, predicts }
    }

    fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

async fn serve(mut sock: TcpStream, mode: Arc<AtomicU8>, predicts: Arc<AtomicU64>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let json = "application/json";
        let answer = |status: &str, ct: &str, body: &str| {
            format!("HTTP/1.1 {status}\r\ncontent-type: {ct}\r\ncontent-length: {}\r\n\r\n{body}", body.len())
        };
        let out = if path == "/readyz" {
            answer("200 OK", "text/plain", "ready")
        } else if path.starts_with("/predict") {
            predicts.fetch_add(1, Ordering::SeqCst);
            let html = format!(
                "<html><pre>Traceback (most recent call last):\n  File \"{SECRET}/app.py\", line 42</pre></html>"
            );
            match mode.load(Ordering::SeqCst) {
                0 => answer("500 Internal Server Error", "text/html", &html),
                1 => answer("200 OK", "text/html", &html),
                2 => answer(
                    "500 Internal Server Error",
                    json,
                    &format!(r#"{{"error":"CUDA error at {SECRET}/kernel.cu:7","error_type":"internal"}}"#),
                ),
                m => {
                    let length =
                        if m == Mode::HugeLength as u8 { format!("content-length: {HUGE}\r\n") } else { String::new() };
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: {json}\r\n{length}connection: close\r\n\r\n");
                    if sock.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let mut body = br#"{"intent":""#.to_vec();
                    body.resize(64 << 10, b'x');
                    let mut sent = 0;
                    while sent < HUGE {
                        if sock.write_all(&body).await.is_err() {
                            return;
                        }
                        sent += body.len();
                        body.fill(b'x');
                    }
                    return;
                }
            }
        } else {
            answer("404 Not Found", json, r#"{"error":"no route","error_type":"not_found"}"#)
        };
        if sock.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A real worker, the hostile one and a gateway in front of both (re-probing every 100 ms, at
/// most 200 ms apart, so that the hostile worker keeps getting traffic after each ejection).
async fn start(mode: Mode, extra: &[&str]) -> (Server, Hostile, Server, String, String) {
    let worker = Server::start(worker_cmd(&[])).await;
    let hostile = Hostile::start(mode).await;
    let mut args = vec!["--worker", &worker.url, "--worker", &hostile.url, "--probe-backoff-max", "200ms"];
    args.extend_from_slice(extra);
    let gw = Server::start(gateway_cmd(&args)).await;
    let admin = gw.announced("admin", Duration::from_secs(2)).await.expect("the admin port");
    let url = gw.url.clone();
    let c = client();
    testkit::wait_until(Duration::from_secs(10), "both workers are ready at the gateway", || async {
        let v = get(&c, &format!("{admin}/v1/pools")).await.body;
        let ready = v[0]["workers"].as_array().map_or(0, |ws| ws.iter().filter(|w| w["health"] == "ready").count());
        ready == 2
    })
    .await;
    (worker, hostile, gw, url, admin)
}

/// `clients` clients send requests until the hostile worker has answered `hits` more `/predict`
/// or `limit` passes; every answer is returned.
async fn load(url: &str, hostile: &Hostile, clients: usize, hits: u64, limit: Duration) -> Vec<Result<Answer, String>> {
    let target = hostile.predicts.load(Ordering::SeqCst) + hits;
    let deadline = tokio::time::Instant::now() + limit;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (c, url, predicts) = (client(), format!("{url}{QUERY}"), Arc::clone(&hostile.predicts));
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while predicts.load(Ordering::SeqCst) < target && tokio::time::Instant::now() < deadline {
                got.push(match c.get(&url).send().await {
                    Ok(r) => Ok(Answer::read(r).await),
                    Err(e) => Err(e.to_string()),
                });
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("a client task"));
    }
    all
}

/// Every answer a 200 with a JSON prediction; none carries the hostile worker's text.
fn all_predictions(answers: &[Result<Answer, String>], what: &str) {
    assert!(!answers.is_empty(), "{what}: no answers");
    for a in answers {
        let a = a.as_ref().unwrap_or_else(|e| panic!("{what}: transport error {e}"));
        let text = a.body.to_string();
        assert!(!text.contains("secret") && !text.contains("Traceback"), "{what}: leaked {text}");
        assert_eq!(a.status, 200, "{what}: {text}");
        assert!(a.body["intent"].is_string(), "{what}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_answering_5xx_or_html_beside_a_real_one_costs_clients_nothing() {
    let _serial = SERIAL.lock().await;
    let (_worker, hostile, _gw, url, admin) = start(Mode::Html500, &[]).await;
    let c = client();
    for (mode, reason) in [(Mode::Html500, "malformed"), (Mode::Html200, "malformed"), (Mode::Json500, "server_error")]
    {
        hostile.set(mode);
        let before = hostile.predicts.load(Ordering::SeqCst);
        let answers = load(&url, &hostile, 8, 20, Duration::from_secs(15)).await;
        let hit = hostile.predicts.load(Ordering::SeqCst) - before;
        assert!(hit >= 20, "{mode:?}: the hostile worker got only {hit} requests in 15 s");
        all_predictions(&answers, &format!("{mode:?}"));
        let m = get(&c, &format!("{admin}/metrics")).await.body.as_str().unwrap_or_default().to_owned();
        assert!(metric_sum(&m, "gateway_retries_total", &[("reason", reason)]) > 0.0, "{mode:?}: no {reason} retry");
        let failing = metric_sum(&m, "gateway_ejections_total", &[("worker", &hostile.url)]);
        assert!(failing > 0.0, "{mode:?}: the hostile worker was never ejected");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_another_worker_a_hostile_answer_is_the_gateways_own_502() {
    let _serial = SERIAL.lock().await;
    let hostile = Hostile::start(Mode::Html500).await;
    let gw = Server::start(gateway_cmd(&["--worker", &hostile.url, "--eject-after", "1000"])).await;
    let c = client();
    testkit::wait_until(Duration::from_secs(10), "the gateway is ready", || async {
        get(&c, &format!("{}/readyz", gw.url)).await.status == 200
    })
    .await;
    for mode in [Mode::Html500, Mode::Html200, Mode::Json500, Mode::HugeLength, Mode::HugeUntilClose] {
        hostile.set(mode);
        let a = get(&c, &format!("{}{QUERY}", gw.url)).await;
        assert_eq!(a.status, 502, "{mode:?}: {}", a.body);
        assert_eq!(a.headers.get("content-type").map(|v| v.to_str().unwrap()), Some("application/json"), "{mode:?}");
        assert_eq!(a.body["error_type"], "upstream", "{mode:?}: {}", a.body);
        assert!(!a.body.to_string().contains("secret"), "{mode:?}: {}", a.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_megabyte_answers_hold_bounded_memory_that_comes_back() {
    let _serial = SERIAL.lock().await;
    let (_worker, hostile, gw, url, admin) = start(Mode::HugeUntilClose, &[]).await;
    let c = client();
    let pid = gw.pid();
    let baseline = rss_bytes(pid);
    let peak = Arc::new(AtomicU64::new(baseline));
    let sampler = {
        let peak = Arc::clone(&peak);
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_bytes(pid), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    for mode in [Mode::HugeUntilClose, Mode::HugeLength] {
        hostile.set(mode);
        let answers = load(&url, &hostile, 48, 200, Duration::from_secs(20)).await;
        all_predictions(&answers, &format!("{mode:?}"));
    }
    sampler.abort();
    let m = get(&c, &format!("{admin}/metrics")).await.body.as_str().unwrap_or_default().to_owned();
    assert_eq!(metric_sum(&m, "gateway_answer_buffered_bytes", &[]), 0.0, "every charge given back");
    assert!(metric_sum(&m, "gateway_retries_total", &[("reason", "malformed")]) > 0.0);
    let (peak, after) = (peak.load(Ordering::SeqCst), rss_bytes(pid));
    let mib = |b: u64| b / (1 << 20);
    println!("gateway RSS: baseline {} MiB, peak {} MiB, after {} MiB", mib(baseline), mib(peak), mib(after));
    // Before the answer cap, 48 clients took it to 525 MB and it stayed above 1 GB with more.
    // Now at most 48 answers of 1 MiB (`--max-answer-bytes`) are read at once, each copied once.
    assert!(peak < baseline + (160 << 20), "peak {} MiB over a {} MiB baseline", mib(peak), mib(baseline));
    assert!(after < baseline + (64 << 20), "after {} MiB over a {} MiB baseline", mib(after), mib(baseline));
}
