//! SIGTERM with requests in flight. (one of the fault families of `main.rs`, which holds the helpers
//! and runs the cases one at a time).

use super::*;

/// SIGTERM straight to a worker while keep-alive connections have requests in it: every one
/// is answered (200) before its connection closes; idle keep-alive connections are closed; the
/// worker exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_every_request_in_flight_on_keep_alive_connections() {
    let _serial = SERIAL.lock().await;
    let mut w = Server::start(worker_cmd(&[])).await;
    let c = client();
    // Eight queries of ~50 tokens: a fraction of a second each, so that all are still in the
    // worker when the signal comes.
    let query = "play some jazz music by miles davis in the living room tonight please ".repeat(4);
    let body = serde_json::json!({ "queries": vec![query; 8] }).to_string();
    let request = format!(
        "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let warm = format!("GET {LIGHT_QUERY} HTTP/1.1\r\nhost: x\r\n\r\n");

    // Keep-alive connections, each used once: eight get a request in flight, four stay idle.
    let mut conns = Vec::new();
    for _ in 0..12 {
        let mut s = connect(&w.url).await;
        let mut pending = Vec::new();
        s.write_all(warm.as_bytes()).await.unwrap();
        assert_eq!(read_answer(&mut s, &mut pending).await.expect("warm-up answer").status, 200);
        conns.push((s, pending));
    }
    let idle = conns.split_off(8);
    let admitted = || async { metric_sum(&metrics(&c, &w.url).await, "worker_admitted_requests_total", &[]) };
    let before = admitted().await;
    for (s, _) in &mut conns {
        s.write_all(request.as_bytes()).await.unwrap();
    }
    // Every one of the eight admitted (a request still being read at the signal would rightly
    // get 503 `unavailable`, and is not what this test is about).
    testkit::wait_until(Duration::from_secs(5), "the requests are in the worker", || async {
        admitted().await >= before + 8.0
    })
    .await;
    signal(w.pid(), Signal::SIGTERM);
    let t = Instant::now();

    let in_flight: Vec<_> = conns
        .into_iter()
        .map(|(mut s, mut pending)| {
            tokio::spawn(async move {
                let a = read_answer(&mut s, &mut pending).await;
                let closed =
                    hold_until_closed(s, Instant::now(), b"", Duration::from_millis(100), Duration::from_secs(10))
                        .await;
                (a, closed)
            })
        })
        .collect();
    let idle: Vec<_> = idle
        .into_iter()
        .map(|(s, _)| {
            tokio::spawn(hold_until_closed(s, Instant::now(), b"", Duration::from_millis(100), Duration::from_secs(10)))
        })
        .collect();
    let status = w.wait_exit(Duration::from_secs(20)).await;
    let exited_after = t.elapsed();
    let mut answered = Vec::new();
    for h in in_flight {
        let (a, closed) = h.await.unwrap();
        let a = a.unwrap_or_else(|e| panic!("a request in flight at SIGTERM was not answered: {e}"));
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        let v: Value = serde_json::from_slice(&a.body).expect("JSON");
        assert_eq!(v["predictions"].as_array().map(Vec::len), Some(8), "{v}");
        assert!(closed.after.is_some(), "the connection was left open after the answer");
        answered.push(a.header("connection").unwrap_or("").to_owned());
    }
    for h in idle {
        let closed = h.await.unwrap();
        assert!(closed.after.is_some(), "an idle keep-alive connection was left open");
        assert!(closed.received.is_empty(), "an idle connection got {:?}", String::from_utf8_lossy(&closed.received));
    }
    eprintln!("SIGTERM: 8 requests in flight answered (connection headers {answered:?}); exit after {exited_after:?}");
    assert!(status.success(), "the worker exits 0 after draining: {status:?}");
}
