//! Every metric name the docs, the Grafana dashboard and the Prometheus rules use exists on the
//! live binaries (issue 33: the admin port served `gateway_gateway_connections_*` while the
//! README said `gateway_connections_*`). promtool and the dashboard generator (`deploy/`) check
//! that the expressions parse; this checks that the names they read are served.
//!
//! Names are read from: the metric tables of `gateway/README.md`, `listener/README.md` (its
//! `{p}_` is each port's prefix: `gateway_`, `gateway_admin_`, `worker_`) and `docs/*.md`
//! (table rows whose first cell is a backquoted `gateway_...` or `worker_...`); every
//! `gateway_...` / `worker_...` identifier in `deploy/grafana/*.json` and
//! `deploy/prometheus/*.yml` that is not part of a recording rule's `a:b:c` name. A name ending
//! in `_*` is a prefix that some served name must start with. Served names are the families of
//! a gateway's admin `/metrics` and a worker's `/metrics` (`# TYPE` lines, so a family with no
//! series yet counts), with the suffixes their type adds. Alone:
//! `cargo build -p worker -p gateway && cargo test -p e2e --test metric_names`.

use std::collections::BTreeSet;
use std::time::Duration;

use testkit::Server;
use testkit::fault::{gateway_cmd, metric_sum, worker_cmd};
use testkit::http::{client, get};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Families that have a series only with a GPU reading, after a panic, or once the external
/// metrics API (off by default) has answered: on this machine they are looked for in the built
/// binary's registered names instead (the name without the binary's prefix and its type's
/// suffix must be in the executable).
fn only_on_a_gpu_or_after_a_panic(name: &str) -> bool {
    name.contains("_gpu_") || name == "gateway_panics_total" || name.starts_with("gateway_metrics_api_")
}

/// A worker that is ready and answers every `/predict` with a JSON 500: it gives the gateway a
/// retry and, after `--eject-after` of them, an ejection to count.
async fn failing_worker() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
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
                    let ready = buf.starts_with(b"GET /readyz");
                    buf.drain(..end + 4);
                    let (status, body) = if ready {
                        ("200 OK", "{}".to_owned())
                    } else {
                        ("500 Internal Server Error", r#"{"error":"boom","error_type":"internal"}"#.to_owned())
                    };
                    let out = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if sock.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// The series names a Prometheus text page serves: each family's name and its type's suffixes.
fn served(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else { continue };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                "summary" => &["_sum", "_count", "_created"],
                _ => &[],
            };
            names.insert(name.to_owned());
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') {
            let series = line.split(['{', ' ']).next().unwrap_or_default();
            if !series.is_empty() {
                names.insert(series.to_owned());
            }
        }
    }
    names
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
}

/// Every `gateway_...` or `worker_...` identifier of `text` not touching a `:` (a recording
/// rule's name) or another identifier character.
fn identifiers(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = text.as_bytes();
    for prefix in ["gateway_", "worker_"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(prefix).map(|i| i + from) {
            let end = at + text[at..].find(|c: char| !is_name_char(c)).unwrap_or(text.len() - at);
            from = end.max(at + 1);
            let before = at.checked_sub(1).map(|i| bytes[i] as char);
            let after = text[end..].chars().next();
            if before.is_some_and(|c| is_name_char(c) || c == ':' || c.is_ascii_uppercase()) || after == Some(':') {
                continue;
            }
            found.insert(text[at..end].to_owned());
        }
    }
    found
}

/// The metric names of the documentation's metric tables (rows whose second cell is a metric
/// type, or empty): the row's first cell, each backquoted name in it (`{p}_x` expanded to every
/// prefix, `a_*` kept as a prefix pattern).
fn documented(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let kind = line.split('|').nth(2).unwrap_or_default().trim();
        if !matches!(kind, "counter" | "gauge" | "histogram" | "") {
            continue;
        }
        let first = line.split('|').nth(1).unwrap_or_default();
        for code in first.split('`').skip(1).step_by(2) {
            let code = code.split('{').next().unwrap_or_default();
            let code = code.split_whitespace().next().unwrap_or_default();
            let expanded: Vec<String> = match code.strip_prefix("{p}_").or_else(|| code.strip_prefix("p_")) {
                Some(rest) => ["gateway_", "gateway_admin_", "worker_"].iter().map(|p| format!("{p}{rest}")).collect(),
                None => vec![code.to_owned()],
            };
            for name in expanded {
                let plain = name.trim_end_matches('*');
                if (plain.starts_with("gateway_") || plain.starts_with("worker_")) && plain.chars().all(is_name_char) {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// The listener README's `{p}_` survives `split('{')` as an empty code; read those rows apart.
fn listener_rows(text: &str) -> BTreeSet<String> {
    documented(&text.replace("`{p}_", "`p_"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_name_in_the_docs_dashboard_and_rules_is_served() {
    let root = testkit::repo_root();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));

    let mut wanted: Vec<(String, String)> = Vec::new();
    let mut add = |source: &str, names: BTreeSet<String>| {
        wanted.extend(names.into_iter().map(|n| (n, source.to_owned())));
    };
    add("gateway/README.md", documented(&read("gateway/README.md")));
    add("listener/README.md", listener_rows(&read("listener/README.md")));
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let rel = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
            add(&rel, documented(&read(&rel)));
        }
    }
    for (dir, ext) in [("deploy/grafana", "json"), ("deploy/prometheus", "yml")] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}")) {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == ext) {
                let rel = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
                add(&rel, identifiers(&read(&rel)));
            }
        }
    }
    assert!(wanted.len() > 40, "too few names found: {wanted:?}");

    let worker = Server::start(worker_cmd(&[])).await;
    let failing = failing_worker().await;
    let gw = Server::start(gateway_cmd(&["--worker", &worker.url, "--worker", &failing, "--eject-after", "2"])).await;
    let admin = gw.announced("admin", Duration::from_secs(2)).await.expect("the admin port");
    let c = client();
    // Requests through both workers until every family that has series only once something
    // happened has them: per-worker series, fresh telemetry, a retry, an ejection.
    let metrics = |c: reqwest::Client| {
        let admin = admin.clone();
        async move { get(&c, &format!("{admin}/metrics")).await.body.as_str().unwrap_or_default().to_owned() }
    };
    testkit::wait_until(Duration::from_secs(20), "a retry, an ejection and fresh telemetry", || async {
        let _ = get(&c, &format!("{}/predict?query=hello", gw.url)).await;
        let m = metrics(c.clone()).await;
        metric_sum(&m, "gateway_ejections_total", &[]) > 0.0
            && metric_sum(&m, "gateway_retries_total", &[]) > 0.0
            && m.contains("\ngateway_worker_queue{")
    })
    .await;
    let mut names = served(&metrics(c.clone()).await);
    names.extend(served(get(&c, &format!("{}/metrics", worker.url)).await.body.as_str().unwrap_or_default()));
    assert!(names.iter().all(|n| !n.starts_with("gateway_gateway_")), "a doubled prefix is served");

    let binaries =
        [testkit::bin("gateway"), testkit::bin("worker")].map(|p| std::fs::read(&p).expect("a built binary"));
    let registered = |name: &str| {
        let bare = name.strip_prefix("gateway_").unwrap_or(name);
        let bare = bare.strip_suffix("_total").unwrap_or(bare).as_bytes();
        binaries.iter().any(|b| b.windows(bare.len()).any(|w| w == bare))
    };
    let missing: Vec<String> = wanted
        .iter()
        .filter(|(name, _)| match name.strip_suffix('*') {
            Some(prefix) => !names.iter().any(|n| n.starts_with(prefix)),
            None if only_on_a_gpu_or_after_a_panic(name) => !names.contains(name) && !registered(name),
            None => !names.contains(name),
        })
        .map(|(name, source)| format!("{name} ({source})"))
        .collect();
    assert!(missing.is_empty(), "documented but not served:\n  {}\nserved: {names:?}", missing.join("\n  "));
}

#[test]
fn names_are_read_as_documented() {
    let table = "| `gateway_requests_total` | counter |\n| `gateway_connections_*`, `gateway_admin_*` | |\n\
                 | `{p}_connections_open` | gauge |\n| `--flag` | x |\n";
    let got = listener_rows(table);
    for n in ["gateway_requests_total", "gateway_connections_*", "gateway_admin_*", "worker_connections_open"] {
        assert!(got.contains(n), "{n} in {got:?}");
    }
    let expr = "expr: rate(gateway_requests_total[5m]) / pool:gateway_requests:rate5m + worker_queue_depth{pool=\"a\"}";
    let ids = identifiers(expr);
    assert_eq!(ids.into_iter().collect::<Vec<_>>(), ["gateway_requests_total", "worker_queue_depth"]);
}
