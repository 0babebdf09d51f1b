//! The merge and the split on explicit answers (the split's bodies against what the worker writes
//! for each query alone), and one merged exchange against scripted workers: every member hears
//! exactly once, the worker's health is touched once, the next merge waiting goes.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use wire::{PredictBatchResponse, Prediction};

use super::*;
use crate::metrics::Metrics;
use crate::pool::Health;
use crate::routing::request::OipSingle;
use crate::upstream::{AnswerBudget, Charge};

fn prediction(intent: &str, score: f32, scores: Option<&[(&str, f32)]>) -> Prediction {
    Prediction {
        intent: intent.to_owned(),
        score,
        scores: scores.map(|s| s.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()),
        logits: None,
    }
}

fn answer(status: u16, content_type: &str, body: impl Into<Bytes>) -> Answer {
    Answer {
        status: StatusCode::from_u16(status).unwrap(),
        content_type: Some(HeaderValue::from_str(content_type).unwrap()),
        retry_after: None,
        body: body.into(),
        charge: None,
    }
}

fn member(query: &str, deadline: Instant) -> (Member, oneshot::Receiver<Delivery>) {
    let (tx, rx) = oneshot::channel();
    let s = Single::new(query, 10).unwrap();
    (Member { json: s.json, tokens: s.tokens, deadline, answer: tx }, rx)
}

#[test]
fn each_core_merges_after_its_part_of_the_exchanges_in_flight() {
    let after = |runtime, threads| {
        let mut cfg = crate::config::Config::for_tests();
        (cfg.runtime, cfg.threads, cfg.coalesce_after_in_flight) = (runtime, threads, 8);
        Policy::from_config(&cfg).unwrap().after_in_flight
    };
    use crate::config::Runtime::{PerCore, Shared};
    assert_eq!(after(Shared, 4), 8, "one queue a worker");
    assert_eq!((after(PerCore, 1), after(PerCore, 3), after(PerCore, 4)), (8, 3, 2));
    assert_eq!(after(PerCore, 16), 1, "at least one each");
}

#[test]
fn the_merged_body_is_the_list_form_of_the_queries() {
    let t = Instant::now();
    let members: Vec<Member> = ["play jazz", "say \"hi\"\n", "北京"].iter().map(|q| member(q, t).0).collect();
    let body = merged_body(&members);
    let parsed: wire::PredictRequest = serde_json::from_slice(&body).unwrap();
    assert_eq!(parsed.queries.unwrap(), ["play jazz", "say \"hi\"\n", "北京"]);
    assert!(parsed.query.is_none() && !parsed.all_scores);
    assert_eq!(body.len(), members.iter().map(|m| m.json.len() + 1).sum::<usize>() + BODY_OVERHEAD - 1);
}

#[test]
fn each_part_of_a_split_is_what_the_worker_answers_that_query_alone() {
    let predictions = vec![
        prediction("PlayMusic", 0.987_654_3, None),
        prediction("Weird\"]},{\\", 1e-7, Some(&[("A", 0.25), ("B\"]", 0.75)])),
        prediction("ÉTÉ", 0.1, None),
    ];
    // The worker writes its list answer and each single answer with the same serializer.
    let list = serde_json::to_vec(&PredictBatchResponse { predictions: predictions.clone() }).unwrap();
    let parts = split(answer(200, "application/json", list), 3).unwrap();
    assert_eq!(parts.len(), 3);
    for (part, p) in parts.iter().zip(&predictions) {
        assert_eq!(part.body, serde_json::to_vec(p).unwrap());
        assert_eq!(part.status, StatusCode::OK);
        assert_eq!(part.content_type.as_ref().unwrap(), "application/json");
        assert!(part.retry_after.is_none());
    }
}

#[test]
fn an_inference_of_the_protocol_is_answered_from_its_item_as_the_worker_answers_it_alone() {
    for (body, score) in [
        (r#"{"id":"a-1","inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["x"]}]}"#, 0.987_654_3),
        (
            r#"{"inputs":[{"name":"text","shape":[1,1],"datatype":"BYTES","data":[["x"]]}],"outputs":[{"name":"score"},{"name":"label"}]}"#,
            1e-7,
        ),
    ] {
        let call = oip::InferCall::from_json(body.as_bytes()).unwrap();
        let p = prediction("PlayMusic", score, None);
        // What the worker answers the request alone (`worker/src/http/oip.rs`).
        let want = serde_json::to_vec(&oip::answer::rest("m", &call, std::slice::from_ref(&p)).unwrap()).unwrap();
        let single =
            Single::oip("x", 3, OipSingle { model: "m".into(), version: None, call: call.clone(), reply: None })
                .unwrap();
        let list = serde_json::to_vec(&PredictBatchResponse { predictions: vec![p] }).unwrap();
        let item = split(answer(200, "application/json", list), 1).unwrap().remove(0);
        let got = single.answer(item).unwrap();
        assert_eq!(String::from_utf8_lossy(&got.body), String::from_utf8_lossy(&want), "{body}");
        assert_eq!(got.content_type.unwrap(), "application/json");
    }
    // A gRPC call takes the prediction itself (answered in protobuf), the body left empty.
    let call =
        oip::InferCall::from_json(br#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["x"]}]}"#)
            .unwrap();
    let reply = Arc::new(OnceLock::new());
    let form = OipSingle { model: "m".into(), version: None, call, reply: Some(Arc::clone(&reply)) };
    let grpc = Single::oip("x", 3, form).unwrap();
    let got = grpc.answer(answer(200, "application/json", r#"{"intent":"A","score":0.5}"#)).unwrap();
    assert!(got.body.is_empty());
    assert_eq!(reply.get(), Some(&prediction("A", 0.5, None)));
    let plain = Single::new("x", 3).unwrap();
    let item = r#"{"intent":"A","score":0.5}"#;
    assert_eq!(
        plain.answer(answer(200, "application/json", item)).unwrap().body,
        item,
        "a /predict request gets the item itself"
    );
}

#[test]
fn items_are_split_from_any_valid_spelling_of_the_list() {
    let body = r#" { "model" : {"a": [1, "]"]}, "n": -1.5e3 ,
        "predictions" : [ {"intent": "A", "score": 1} ,{"intent":"B\\\"","score":0.5}
        ] } "#;
    let parts = split(answer(200, "application/json", body), 2).unwrap();
    let text: Vec<&[u8]> = parts.iter().map(|p| p.body.as_ref()).collect();
    assert_eq!(text, [br#"{"intent": "A", "score": 1}"#.as_slice(), br#"{"intent":"B\\\"","score":0.5}"#]);
}

#[test]
fn an_answer_that_does_not_split_into_one_prediction_per_query_is_refused() {
    let two = serde_json::to_vec(&PredictBatchResponse {
        predictions: vec![prediction("A", 0.5, None), prediction("B", 0.5, None)],
    })
    .unwrap();
    let cases = [
        (answer(200, "application/json", two.clone()), 3, "2 predictions for 3 queries"),
        (answer(200, "text/html", two.clone()), 2, "not JSON"),
        (answer(200, "application/json", r#"{"intent":"A","score":0.5}"#), 1, "not a list"),
        (answer(200, "application/json", r#"{"predictions":[{"intent":"A"}]}"#), 1, "not a list"),
        (answer(200, "application/json", r#"{"predictions":{}}"#), 1, "not a list"),
        (answer(200, "application/json", r#"{"other":[{"intent":"A","score":0.5}]}"#), 1, "not a list"),
        (answer(200, "application/json", r#"[{"predictions":[{"intent":"A","score":0.5}]}]"#), 1, "not a list"),
        (answer(200, "application/json", r#"{"predictions":[{"intent":"A","score":"high"}]}"#), 1, "not a list"),
        (answer(200, "application/json", ""), 1, "not a list"),
    ];
    for (a, n, why) in cases {
        let e = split(a, n).unwrap_err();
        assert!(e.contains(why), "{e} (expected {why:?})");
    }
}

#[test]
fn the_charge_of_a_split_answer_goes_with_its_parts() {
    let budget = AnswerBudget::new(1 << 20, Default::default());
    let list = serde_json::to_vec(&PredictBatchResponse {
        predictions: vec![prediction("A", 0.5, None), prediction("B", 0.25, None)],
    })
    .unwrap();
    let mut charge = Charge::new(&budget);
    assert!(charge.grow_to(list.len()));
    let total = list.len() as i64;
    let a = Answer { charge: Some(charge), ..answer(200, "application/json", list) };
    let mut parts = split(a, 2).unwrap();
    assert!(budget.used() > 0 && budget.used() <= total, "the list's bytes stay charged");
    parts.pop();
    assert!(budget.used() > 0);
    drop(parts);
    assert_eq!(budget.used(), 0, "every byte given back once the parts are written");
}

/// A worker that answers every connection's first request with `answer(body)` (or closes the
/// connection without a word when it gives `None`), and counts the requests.
async fn scripted(
    answer: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
) -> (String, Arc<std::sync::atomic::AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (answer, n) = (Arc::new(answer), Arc::clone(&count));
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (answer, n) = (Arc::clone(&answer), Arc::clone(&n));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // The head, then the body by its Content-Length.
                let body = loop {
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                        }
                    }
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                };
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Some(out) = answer(&body) {
                    let _ = sock.write_all(out.as_bytes()).await;
                    // Held open until the gateway is done with it.
                    let _ = sock.read(&mut chunk).await;
                }
            });
        }
    });
    (url, count)
}

fn http_answer(status: &str, extra: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// An endpoint of `url`, ready, with a context whose `--eject-after` is `eject_after`.
fn endpoint(url: &str, eject_after: u32) -> (Arc<Ctx>, Arc<Endpoint>) {
    let ctx = Arc::new(Ctx::for_tests(|c| c.eject_after = eject_after));
    let ep =
        Endpoint::new("p", url, crate::pool::Rtt::from_config(&ctx.config), 4, 1, Arc::default(), &Metrics::default())
            .unwrap();
    ep.set_health(Health::Ready);
    (ctx, Arc::new(ep))
}

const POLICY: Policy = Policy { after_in_flight: 1, max_queries: 32, max_tokens: 256, max_bytes: 1 << 16 };

/// Send `queries` as one merge to `ep`; each member's delivery.
async fn merge(ctx: &Arc<Ctx>, ep: &Arc<Endpoint>, queries: &[&str]) -> Vec<Delivery> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let (members, receivers): (Vec<_>, Vec<_>) = queries.iter().map(|q| member(q, deadline)).unzip();
    // Counted in flight as the queue counts a merge it hands out.
    let Arrival::Alone(_) = ep.coalesce(ep.slot()).arrive(member("x", deadline).0, &POLICY) else {
        panic!("nothing in flight")
    };
    send(Arc::clone(ctx), Arc::clone(ep), ep.slot(), POLICY, members);
    let mut out = Vec::new();
    for rx in receivers {
        out.push(tokio::time::timeout(Duration::from_secs(5), rx).await.expect("every member hears").expect("a word"));
    }
    out
}

#[tokio::test]
async fn a_merged_answer_reaches_each_member_as_its_own() {
    let (url, count) = scripted(|body| {
        let req: wire::PredictRequest = serde_json::from_str(body).unwrap();
        let predictions = req.queries.unwrap().iter().map(|q| prediction(q, 0.5, None)).collect();
        Some(http_answer("200 OK", "", &serde_json::to_string(&PredictBatchResponse { predictions }).unwrap()))
    })
    .await;
    let (ctx, ep) = endpoint(&url, 5);
    let got = merge(&ctx, &ep, &["a", "b", "c"]).await;
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1, "one exchange for three requests");
    for (d, q) in got.into_iter().zip(["a", "b", "c"]) {
        let Delivery::Done { verdict: Verdict::Answer, result: Ok((a, None)) } = d else { panic!("{d:?}") };
        assert_eq!(a.body, serde_json::to_vec(&prediction(q, 0.5, None)).unwrap());
    }
    assert_eq!((ep.coalesced_requests.get(), ep.coalesced_exchanges.get()), (3, 1));
}

#[tokio::test]
async fn a_failed_merge_is_one_failure_of_the_worker_and_each_member_may_go_elsewhere() {
    // Dropped mid-way (the request read, no answer), then the wrong number of items: with
    // --eject-after 2, counting a failure per member would eject the worker at the first.
    let (url, _) = scripted(|_| None).await;
    let (ctx, ep) = endpoint(&url, 2);
    for d in merge(&ctx, &ep, &["a", "b", "c"]).await {
        let Delivery::Done { verdict: Verdict::Retry(RetryReason::Dropped), result: Err(detail) } = d else {
            panic!("{d:?}")
        };
        assert!(detail.contains(&url), "{detail}");
    }
    assert_eq!(ep.health(), Health::Ready, "one failure, not three");

    let (url, _) =
        scripted(|_| Some(http_answer("200 OK", "", r#"{"predictions":[{"intent":"A","score":0.5}]}"#))).await;
    let (ctx, ep) = endpoint(&url, 2);
    for d in merge(&ctx, &ep, &["a", "b"]).await {
        assert!(
            matches!(d, Delivery::Done { verdict: Verdict::Retry(RetryReason::Malformed), result: Err(_) }),
            "{d:?}"
        );
    }
    assert_eq!(ep.health(), Health::Ready);
}

#[tokio::test]
async fn a_refused_merge_is_refused_for_each_member_with_the_workers_retry_after() {
    let (url, _) = scripted(|_| {
        Some(http_answer(
            "429 Too Many Requests",
            "retry-after: 3\r\n",
            r#"{"error":"full","error_type":"overloaded"}"#,
        ))
    })
    .await;
    let (ctx, ep) = endpoint(&url, 5);
    for d in merge(&ctx, &ep, &["a", "b"]).await {
        let Delivery::Done { verdict: Verdict::Retry(RetryReason::Overloaded), result: Ok((a, error_type)) } = d else {
            panic!("{d:?}")
        };
        assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(a.retry_after.unwrap(), "3");
        assert_eq!(error_type, Some(wire::ErrorType::Overloaded));
    }
    let (url, _) = scripted(|_| {
        Some(http_answer("503 Service Unavailable", "", r#"{"error":"draining","error_type":"unavailable"}"#))
    })
    .await;
    let (ctx, ep) = endpoint(&url, 5);
    for d in merge(&ctx, &ep, &["a", "b"]).await {
        assert!(matches!(d, Delivery::Done { verdict: Verdict::Retry(RetryReason::Unavailable), .. }), "{d:?}");
    }
    assert_eq!(ep.health(), Health::NotReady, "a draining worker leaves the rotation");
}

#[tokio::test]
async fn a_merge_the_worker_will_not_take_as_a_request_sends_each_member_alone() {
    let (url, _) = scripted(|_| {
        Some(http_answer("400 Bad Request", "", r#"{"error":"query 1 is empty","error_type":"invalid_request"}"#))
    })
    .await;
    let (ctx, ep) = endpoint(&url, 5);
    for d in merge(&ctx, &ep, &["a", "b"]).await {
        assert!(matches!(d, Delivery::Alone), "{d:?}");
    }
}

#[tokio::test]
async fn a_merge_past_its_deadline_tells_each_member_and_the_next_waiting_merge_goes() {
    // A worker that reads and never answers.
    let (url, count) = scripted(|_| Some(String::new())).await;
    let (ctx, ep) = endpoint(&url, 5);
    let soon = Instant::now() + Duration::from_millis(50);
    let (first, rx1) = member("a", soon);
    let (second, rx2) = member("b", soon);
    // `first` goes alone (counted in flight); `second` waits; the merge of `first`'s place...
    let Arrival::Alone(first) = ep.coalesce(ep.slot()).arrive(first, &POLICY) else { panic!("alone") };
    assert!(matches!(ep.coalesce(ep.slot()).arrive(second, &POLICY), Arrival::Wait));
    // ...goes when `first`'s exchange ends: here, as a merge of its own that times out.
    send(Arc::clone(&ctx), Arc::clone(&ep), ep.slot(), POLICY, vec![first]);
    assert!(matches!(rx1.await, Ok(Delivery::TimedOut)));
    assert!(matches!(rx2.await, Ok(Delivery::TimedOut)), "the waiting one went next, and timed out too");
    assert!(count.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    // Its exchange ends just after its word: then nothing is in flight.
    let idle = async {
        while ep.coalesce(ep.slot()).in_flight() != 0 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), idle).await.expect("every exchange ended");
    assert_eq!(ep.health(), Health::Ready, "slow is not failed");
}

#[test]
fn an_inference_merges_only_to_a_worker_whose_stats_name_its_model() {
    let (_ctx, ep) = endpoint("http://127.0.0.1:9", 5);
    let call =
        oip::InferCall::from_json(br#"{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["x"]}]}"#)
            .unwrap();
    let asking = |model: &str, version: Option<&str>| {
        let form =
            OipSingle { model: model.into(), version: version.map(str::to_owned), call: call.clone(), reply: None };
        Single::oip("x", 3, form).unwrap()
    };
    let predict = Single::new("x", 3).unwrap();
    assert!(predict.may_merge_on(&ep), "a /predict request needs no stats");
    assert!(!asking("m", None).may_merge_on(&ep), "no stats yet: the model is not known");
    let stats = |model: &str| {
        let doc = serde_json::json!({
            "schema_version": 1, "ready": true, "draining": false,
            "queue": {"queued": 0, "in_flight": 0}, "gpu": {"status": "unavailable", "reason": "none"},
            "model": {"name": model, "device": "cpu", "labels": ["a"]},
        });
        crate::pool::StatsView::parse(doc.to_string().as_bytes()).unwrap()
    };
    ep.store_snapshot(&stats("m"));
    assert!(asking("m", None).may_merge_on(&ep));
    assert!(asking("m", Some("1")).may_merge_on(&ep));
    assert!(!asking("m", Some("2")).may_merge_on(&ep), "a version the worker does not serve goes alone");
    assert!(!asking("other", None).may_merge_on(&ep), "another model goes alone: the worker answers 404");
    ep.store_snapshot(&stats("other"));
    assert!(asking("other", None).may_merge_on(&ep) && !asking("m", None).may_merge_on(&ep), "a new model is seen");
}
