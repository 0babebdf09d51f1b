//! Serving-certificate rotation under load, with the files laid out as a Kubernetes Secret
//! volume (`tls.crt -> ..data/tls.crt`, `..data -> ..<version>`, swapped by renaming a new
//! `..data` link over the old one): new connections get the new certificate, connections already
//! open keep working, no request fails; a bad new pair (a key that does not match) keeps the
//! current certificate and is counted.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

/// Write a new version of the Secret and swap `..data` to it atomically.
fn publish(dir: &Path, version: u32, cert: &str, key: &str) {
    let v = dir.join(format!("..v{version}"));
    std::fs::create_dir_all(&v).unwrap();
    std::fs::write(v.join("tls.crt"), cert).unwrap();
    std::fs::write(v.join("tls.key"), key).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..v{version}"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificate_is_served_to_new_connections_without_failing_a_request() {
    let dir = TempDir::new("rotation");
    let (server_ca, client_ca) = (Ca::new("serving-ca"), Ca::new("client-ca"));
    let (first, second) = (server_ca.server(), server_ca.server());
    publish(&dir.0, 1, &first.cert_pem, &first.key_pem);
    std::os::unix::fs::symlink("..data/tls.crt", dir.0.join("tls.crt")).unwrap();
    std::os::unix::fs::symlink("..data/tls.key", dir.0.join("tls.key")).unwrap();
    let client_ca_file = dir.write("client-ca.pem", &client_ca.pem);
    let args = [
        "--tls-cert-file".to_owned(),
        path_str(&dir.0.join("tls.crt")),
        "--tls-private-key-file".to_owned(),
        path_str(&dir.0.join("tls.key")),
        "--client-ca-file".to_owned(),
        path_str(&client_ca_file),
        "--authorization-mode".to_owned(),
        "AlwaysAllow".to_owned(),
    ];
    let pools = Arc::new(FixedPools(Mutex::new(vec![pool("default", "default", &[], 1.5)])));
    let (api, metrics) = start_api(&args.iter().map(String::as_str).collect::<Vec<_>>(), pools).await;
    let addr = api.addr;
    let cfg = client_config(&server_ca, Some(&client_ca.client("hpa", &[])));
    let path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gateway_pool_signal";

    // Load: four keep-alive clients and four that connect for every request.
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let mut load = Vec::new();
    for i in 0..8 {
        let (stop, done, failed, failures, cfg) =
            (Arc::clone(&stop), Arc::clone(&done), Arc::clone(&failed), Arc::clone(&failures), Arc::clone(&cfg));
        load.push(tokio::spawn(async move {
            let keep_alive = i % 2 == 0;
            let mut conn = None;
            while !stop.load(Ordering::SeqCst) {
                if conn.is_none() || !keep_alive {
                    conn = match Conn::open(addr, Arc::clone(&cfg)).await {
                        Ok(c) => Some(c),
                        Err(e) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            failures.lock().unwrap().push(format!("connect: {e}"));
                            continue;
                        }
                    };
                }
                match conn.as_mut().unwrap().try_get(path, &[]).await {
                    Ok(a) if a.status == http::StatusCode::OK => {
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    other => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        failures.lock().unwrap().push(format!("{other:?}"));
                        conn = None;
                    }
                }
            }
        }));
    }
    let d = Arc::clone(&done);
    wait_for(|| d.load(Ordering::SeqCst) > 200, "load running").await;

    // Rotate: new connections get the second certificate.
    publish(&dir.0, 2, &second.cert_pem, &second.key_pem);
    let started = Instant::now();
    loop {
        let c = Conn::open(addr, Arc::clone(&cfg)).await.unwrap();
        if c.server_cert == second.der() {
            break;
        }
        assert_eq!(c.server_cert, first.der());
        assert!(started.elapsed() < Duration::from_secs(10), "the new certificate was not picked up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before_bad = done.load(Ordering::SeqCst);

    // A bad pair (a third certificate with the first key): kept out, counted, logged.
    let third = server_ca.server();
    publish(&dir.0, 3, &third.cert_pem, &first.key_pem);
    let m = metrics.clone();
    wait_for(|| m.reloads.get_or_create(&result("error")).get() == 1, "the bad pair is refused").await;
    for _ in 0..5 {
        assert_eq!(Conn::open(addr, Arc::clone(&cfg)).await.unwrap().server_cert, second.der());
    }
    let d = Arc::clone(&done);
    wait_for(|| d.load(Ordering::SeqCst) > before_bad + 100, "load continues").await;

    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::SeqCst), 0, "{:?}", failures.lock().unwrap());
    assert_eq!(metrics.reloads.get_or_create(&result("ok")).get(), 1);
    eprintln!("{} requests, none failed", done.load(Ordering::SeqCst));
}

fn result(r: &str) -> metrics_api::ResultLabels {
    metrics_api::ResultLabels { result: r.to_owned() }
}
