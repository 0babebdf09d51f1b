//! Slow and idle clients cost nothing. (one of the fault families of `main.rs`, which holds the helpers
//! and runs the cases one at a time).

use super::*;

const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const BODY_TIMEOUT: Duration = Duration::from_secs(2);
const IDLE_TIMEOUT: Duration = Duration::from_secs(1);
/// How late a close may come after its timeout (two cores, debug builds, hundreds of sockets).
const CLOSE_MARGIN: Duration = Duration::from_secs(2);
/// How early: a close well before the timeout is some other limit at work.
const CLOSE_EARLY: Duration = Duration::from_millis(200);
/// The listener flags both servers run with here.
const HYGIENE: [&str; 8] = [
    "--header-read-timeout",
    "1s",
    "--body-read-timeout",
    "2s",
    "--idle-timeout",
    "1s",
    "--max-buffered-body-bytes",
    "8388608",
];
/// Growth of resident memory allowed under the flood: the 8 MiB body budget and per-connection
/// state of ~800 connections, with room to spare. Unbounded, the nearly complete bodies alone
/// would take 200 x `max_body` (200 MB at the gateway, 50 MB at the worker).
const RSS_GROWTH_LIMIT: u64 = 40 << 20;

/// Kinds of misbehaving connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Connects and sends nothing: closed at the header timeout.
    Silent,
    /// Sends its head one byte every 100 ms: closed at the header timeout (a deadline, however
    /// steadily it sends).
    SlowHead,
    /// Sends a head and then its body one byte every 200 ms: closed at the body timeout.
    SlowBody,
    /// Sends a head and all of a large body but its last byte: closed at the body timeout (or
    /// refused at once when the body budget is spent), its bytes never all held.
    StalledBody,
    /// One whole request, its answer read, then nothing: closed at the idle timeout.
    IdleKeepAlive,
}

impl Kind {
    /// The timeout that closes it, counted from the instant its clock starts here.
    fn timeout(self) -> Duration {
        match self {
            Self::Silent | Self::SlowHead => HEADER_TIMEOUT,
            Self::SlowBody | Self::StalledBody => BODY_TIMEOUT,
            Self::IdleKeepAlive => IDLE_TIMEOUT,
        }
    }
}

/// Floods the server at `url` (process `pid`) with misbehaving connections while a client keeps
/// sending light requests (every one must be 200), and checks memory and every close time.
async fn slow_and_idle_flood(url: &str, pid: i32, max_body: usize) {
    let c = client();
    for _ in 0..5 {
        assert_eq!(get(&c, &format!("{url}{LIGHT_QUERY}")).await.status, 200);
    }
    let baseline = rss_bytes(pid);
    let mix = [
        (Kind::Silent, 200),
        (Kind::SlowHead, 100),
        (Kind::SlowBody, 100),
        (Kind::StalledBody, 200),
        (Kind::IdleKeepAlive, 200),
    ];
    let limit = BODY_TIMEOUT + CLOSE_MARGIN + Duration::from_secs(1);
    let big_body = Arc::new(vec![b'x'; max_body - 1]);
    let few_at_a_time = Arc::new(tokio::sync::Semaphore::new(16));
    // The kinds interleaved, one connection opened every millisecond: a burst of 800 connects
    // at once can overflow the kernel's accept queue on a busy machine, and a connection the
    // kernel has dropped from it (the client believes it open) is accepted, and its clock
    // started, only at a SYN-ACK retransmission seconds later: that is the kernel's doing, not
    // the timeouts under test.
    let mut kinds: Vec<Vec<Kind>> = mix.iter().map(|&(kind, n)| vec![kind; n]).collect();
    let mut order = Vec::new();
    while kinds.iter().any(|k| !k.is_empty()) {
        order.extend(kinds.iter_mut().filter_map(Vec::pop));
    }
    let mut conns = Vec::new();
    for (i, kind) in order.into_iter().enumerate() {
        let (url, big_body, few_at_a_time) = (url.to_owned(), big_body.clone(), few_at_a_time.clone());
        let start_at = tokio::time::Instant::now() + Duration::from_millis(i as u64);
        conns.push(tokio::spawn(async move {
                tokio::time::sleep_until(start_at).await;
                // Idle keep-alive connections make their request a few at a time (from the
                // connection's opening: the header timeout runs from there), so that they do not
                // crowd the light client out of the admission bound.
                let permit = match kind {
                    Kind::IdleKeepAlive => Some(few_at_a_time.acquire_owned().await.unwrap()),
                    _ => None,
                };
                // Every clock starts before the server's can (before the connect, the head, the
                // request): a close measured here is never early by the test's own delays.
                let since = Instant::now();
                let mut s = connect(&url).await;
                let closed = match kind {
                    Kind::Silent => hold_until_closed(s, since, b"", Duration::from_millis(100), limit).await,
                    Kind::SlowHead => {
                        let head = b"GET /predict?query=jazz HTTP/1.1\r\nhost: x\r\nuser-agent: slow\r\n\r\n";
                        hold_until_closed(s, since, head, Duration::from_millis(100), limit).await
                    }
                    Kind::SlowBody | Kind::StalledBody => {
                        let len = if kind == Kind::SlowBody { 64 } else { max_body };
                        let head = format!(
                            "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
                        );
                        s.write_all(head.as_bytes()).await.expect("head");
                        if kind == Kind::SlowBody {
                            hold_until_closed(s, since, &[b' '; 63], Duration::from_millis(200), limit).await
                        } else {
                            // Written by another task: the server may stop reading (a full socket
                            // buffer) and the write must not hold the close detection up.
                            let (mut r, mut w) = s.into_split();
                            let writer = tokio::spawn(async move {
                                let _ = w.write_all(&big_body).await;
                                w
                            });
                            let mut buf = Vec::new();
                            let t = tokio::time::timeout_at(
                                tokio::time::Instant::from_std(since + limit),
                                tokio::io::AsyncReadExt::read_to_end(&mut r, &mut buf),
                            )
                            .await;
                            writer.abort();
                            Closed { after: t.is_ok().then(|| since.elapsed()), received: buf }
                        }
                    }
                    Kind::IdleKeepAlive => {
                        s.write_all(format!("GET {LIGHT_QUERY} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
                            .await
                            .expect("request");
                        let mut pending = Vec::new();
                        let a = read_answer(&mut s, &mut pending).await.expect("an answer");
                        assert_eq!(a.status, 200);
                        drop(permit);
                        hold_until_closed(s, since, b"", Duration::from_millis(100), limit).await
                    }
                };
                (kind, closed)
            }));
    }

    // Light requests beside the flood, each on a new connection (the listener's cap is not
    // reached), for as long as the misbehaving connections are open; and memory meanwhile.
    let light = {
        let url = format!("{url}{LIGHT_QUERY}");
        tokio::spawn(async move {
            let c =
                reqwest::Client::builder().timeout(Duration::from_secs(5)).pool_max_idle_per_host(0).build().unwrap();
            let (t, mut statuses) = (Instant::now(), BTreeMap::<String, u64>::new());
            while t.elapsed() < BODY_TIMEOUT + Duration::from_secs(1) {
                let key = match try_get(&c, &url).await {
                    Ok(a) if a.status == 200 => "200".to_owned(),
                    Ok(a) => format!("{} {}", a.status, a.body),
                    Err(e) => format!("transport: {e}"),
                };
                *statuses.entry(key).or_default() += 1;
            }
            statuses
        })
    };
    let mut peak = baseline;
    let t = Instant::now();
    while t.elapsed() < BODY_TIMEOUT + Duration::from_secs(1) {
        peak = peak.max(rss_bytes(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let light = light.await.unwrap();

    let mut by_kind: BTreeMap<Kind, Vec<Closed>> = BTreeMap::new();
    for conn in conns {
        let (kind, closed) = conn.await.expect("a misbehaving connection's task");
        by_kind.entry(kind).or_default().push(closed);
    }
    eprintln!(
        "RSS {} MiB before, {} MiB at most under the flood (+{:.1} MiB); light requests meanwhile: {light:?}",
        baseline >> 20,
        peak >> 20,
        (peak - baseline) as f64 / f64::from(1 << 20),
    );
    for (kind, closed) in &by_kind {
        let mut after: Vec<_> = closed.iter().filter_map(|c| c.after).collect();
        after.sort();
        let mut statuses = BTreeMap::<Option<u16>, u64>::new();
        for c in closed {
            *statuses.entry(c.status()).or_default() += 1;
        }
        eprintln!(
            "{kind:?}: {} closed of {}, after {:?} to {:?} (timeout {:?}); answers {statuses:?}",
            after.len(),
            closed.len(),
            after.first(),
            after.last(),
            kind.timeout()
        );
    }

    assert_eq!(light.keys().collect::<Vec<_>>(), vec!["200"], "light requests beside the flood: {light:?}");
    assert!(light["200"] >= 5, "only {} light requests answered beside the flood", light["200"]);
    assert!(
        peak - baseline <= RSS_GROWTH_LIMIT,
        "RSS grew by {} MiB under the flood (limit {} MiB)",
        (peak - baseline) >> 20,
        RSS_GROWTH_LIMIT >> 20
    );
    for (kind, closed) in by_kind {
        for c in closed {
            let after = c.after.unwrap_or_else(|| {
                panic!("{kind:?}: a connection still open {limit:?} in (timeout {:?}): {c:?}", kind.timeout())
            });
            assert!(
                after <= kind.timeout() + CLOSE_MARGIN,
                "{kind:?}: closed after {after:?}, timeout {:?}",
                kind.timeout()
            );
            // A stalled body may be refused (503) whenever the body budget runs out, and that
            // answer may be lost to the reset of a socket closed with unread bytes: no lower
            // bound for it.
            assert!(
                kind == Kind::StalledBody || after + CLOSE_EARLY >= kind.timeout(),
                "{kind:?}: closed after {after:?}, before its timeout {:?}: {:?}",
                kind.timeout(),
                String::from_utf8_lossy(&c.received)
            );
        }
    }
}

/// The worker's own listener under slow and idle clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_cost_the_worker_nothing() {
    let _serial = SERIAL.lock().await;
    let w = Server::start(worker_cmd(&HYGIENE)).await;
    // The worker's --max-body-bytes default.
    slow_and_idle_flood(&w.url, w.pid(), 256 << 10).await;
}

/// The gateway's listener under slow and idle clients: they hold neither admission permits
/// (64 here, fewer than the slow requests) nor unbounded memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_cost_the_gateway_nothing() {
    let _serial = SERIAL.lock().await;
    let w = Server::start(worker_cmd(&[])).await;
    let mut flags = vec!["--worker", &w.url, "--max-outstanding", "64"];
    flags.extend(HYGIENE);
    let (gw, admin) = start_gateway(&flags).await;
    wait_health(&client(), &admin, &w.url, true, Duration::from_secs(10)).await;
    // The gateway's --max-body-bytes default.
    slow_and_idle_flood(&gw.url, gw.pid(), 1 << 20).await;
}
