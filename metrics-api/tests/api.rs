//! The external metrics API over real TLS with certificates made here: front-proxy requests
//! authorized by SubjectAccessReviews from a mocked kube-apiserver, trust read from flags or from
//! the `extension-apiserver-authentication` ConfigMap (and its changes), every refusal a counted
//! `Status`, selectors and namespaces. Certificate rotation is in `rotation.rs`; the gateway's
//! provider (fail-static values over real pools, two gateways over the same workers agreeing)
//! in `gateway/tests/metrics_api.rs`, `kubectl` against the gateway binary in
//! `gateway/tests/metrics_api_kubectl.rs`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};
use support::*;
const HPA: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";

fn assert_status(a: &Answer, code: u16, reason: &str) {
    assert_eq!(a.status.as_u16(), code, "{:?}", a.body);
    assert_eq!(a.body["kind"], "Status", "{:?}", a.body);
    assert_eq!(a.body["apiVersion"], "v1");
    assert_eq!(a.body["status"], "Failure");
    assert_eq!(a.body["code"], code);
    assert_eq!(a.body["reason"], reason, "{:?}", a.body);
}

fn fixed_pools() -> Arc<FixedPools> {
    Arc::new(FixedPools(Mutex::new(vec![
        pool("default", "ml", &[("tier", "online")], 2.5),
        pool("batch", "ml", &[("tier", "batch")], 1.25),
        pool("canary", "ml", &[], 0.5),
        pool("default", "other", &[], 9.0),
    ])))
}

fn hpa_headers() -> Vec<(&'static str, &'static str)> {
    vec![("X-Remote-User", HPA), ("X-Remote-Group", "system:serviceaccounts"), ("X-Remote-Extra-Scopes", "hpa")]
}

#[tokio::test]
async fn front_proxy_user_is_authorized_by_a_subject_access_review_with_trust_from_the_configmap() {
    let pki = Pki::new("proxy");
    let mock =
        MockApi::start(&pki.dir, auth_configmap(Some(&pki.client_ca), &pki.proxy_ca, &["front-proxy-client"]), &[HPA])
            .await;
    let kc = path_str(&mock.kubeconfig);
    let mut a = pki.serving_args();
    a.extend(["--authentication-kubeconfig".into(), kc.clone(), "--authorization-kubeconfig".into(), kc]);
    let (api, metrics) = start_api(&args(&a), fixed_pools()).await;

    let mut proxy = Conn::open(api.addr, pki.proxy("front-proxy-client")).await.unwrap();
    let all = decode(&proxy.get(&format!("{V}/namespaces/ml/gateway_pool_signal"), &hpa_headers()).await);
    assert_eq!(all.items.len(), 3, "every pool of namespace ml, none of namespace other");
    let one = decode(
        &proxy
            .get(&format!("{V}/namespaces/ml/gateway_pool_signal?labelSelector=pool%3Ddefault"), &hpa_headers())
            .await,
    );
    assert_eq!(one.items.len(), 1);
    assert_eq!(one.items[0].value.0, "2500m");
    assert_eq!(one.items[0].metric_labels["tier"], "online");

    // One review for both requests (the selector is not part of the question), naming exactly
    // what kube's webhook authorizer names.
    let reviews = mock.reviews();
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    assert_eq!(reviews[0]["user"], HPA);
    assert_eq!(reviews[0]["groups"], json!(["system:serviceaccounts", "system:authenticated"]));
    assert_eq!(reviews[0]["extra"], json!({"scopes": ["hpa"]}));
    assert_eq!(
        reviews[0]["resourceAttributes"],
        json!({"verb": "list", "group": "external.metrics.k8s.io", "version": "v1beta1", "namespace": "ml",
               "resource": "gateway_pool_signal"})
    );

    // A user the review denies: 403, counted, cached as denied.
    let mallory = [("X-Remote-User", "mallory")];
    for _ in 0..2 {
        let a = proxy.get(&format!("{V}/namespaces/ml/gateway_pool_signal"), &mallory).await;
        assert_status(&a, 403, "Forbidden");
        let msg = a.body["message"].as_str().unwrap();
        assert!(
            msg.contains(r#"User "mallory" cannot list resource "gateway_pool_signal" in API group "external.metrics.k8s.io" in the namespace "ml""#),
            "{msg}"
        );
        assert!(msg.contains("no RBAC policy matched"), "{msg}");
    }
    assert_eq!(mock.reviews().len(), 2);
    assert_eq!(metrics.requests_with(403, "Forbidden"), 2);
    assert_eq!(metrics.requests_with(200, "ok"), 2);

    // Discovery is a non-resource request: its own review.
    let d = proxy.get("/apis", &hpa_headers()).await;
    assert_eq!(d.status, StatusCode::OK);
    let last = mock.reviews().pop().unwrap();
    assert_eq!(last["nonResourceAttributes"], json!({"path": "/apis", "verb": "get"}));
}

#[tokio::test]
async fn every_refusal_is_a_counted_status_and_nothing_leaks() {
    let pki = Pki::new("refusals");
    let mock = MockApi::start(&pki.dir, Default::default(), &[HPA]).await;
    let mut a = pki.serving_args();
    a.extend([
        "--client-ca-file".into(),
        path_str(&pki.dir.write("client-ca.pem", &pki.client_ca.pem)),
        "--requestheader-client-ca-file".into(),
        path_str(&pki.dir.write("proxy-ca.pem", &pki.proxy_ca.pem)),
        "--requestheader-allowed-names".into(),
        "front-proxy-client,aggregator".into(),
        "--authorization-kubeconfig".into(),
        path_str(&mock.kubeconfig),
    ]);
    let (api, metrics) = start_api(&args(&a), fixed_pools()).await;
    let values = format!("{V}/namespaces/ml/gateway_pool_signal");

    // No certificate: 401, on the values and on a path that does not exist (no 404 to learn from).
    let anonymous = client_config(&pki.server_ca, None);
    for path in [values.as_str(), "/apis", "/no/such/path", "/openapi/v2"] {
        let a = get_once(api.addr, &anonymous, path, &hpa_headers()).await;
        assert_status(&a, 401, "Unauthorized");
        assert_eq!(a.body["message"], "Unauthorized");
        assert!(!a.raw.windows(4).any(|w| w == b"pool"), "{:?}", a.body);
    }
    assert_eq!(metrics.requests_with(401, "no_client_certificate"), 4);
    // ... but the health paths answer, and say nothing else.
    for path in ["/healthz", "/livez", "/readyz"] {
        let a = get_once(api.addr, &anonymous, path, &[]).await;
        assert_eq!((a.status, a.body.clone()), (StatusCode::OK, Value::String("ok".into())), "{path}");
    }

    // A certificate from a CA nobody configured, even with the allowed CN: 401.
    let rogue = Ca::new("front-proxy-ca");
    let a = get_once(
        api.addr,
        &client_config(&pki.server_ca, Some(&rogue.client("front-proxy-client", &[]))),
        &values,
        &hpa_headers(),
    )
    .await;
    assert_status(&a, 401, "Unauthorized");
    assert_eq!(metrics.requests_with(401, "untrusted_certificate"), 1);

    // The front-proxy CA, but a CN not in --requestheader-allowed-names: its headers are not trusted.
    let a = get_once(api.addr, &pki.proxy("intruder"), &values, &hpa_headers()).await;
    assert_status(&a, 401, "Unauthorized");
    assert_eq!(metrics.requests_with(401, "proxy_name_not_allowed"), 1);

    // An allowed front proxy that names no user.
    let a = get_once(api.addr, &pki.proxy("aggregator"), &values, &[]).await;
    assert_status(&a, 401, "Unauthorized");
    assert_eq!(metrics.requests_with(401, "proxy_without_user"), 1);
    assert!(mock.reviews().is_empty(), "nothing unauthenticated reaches the authorizer");

    // A client certificate's own identity: request headers claiming another user are ignored.
    let a = get_once(api.addr, &pki.client("alice", &["ops"]), &values, &hpa_headers()).await;
    assert_status(&a, 403, "Forbidden");
    let r = mock.reviews().pop().unwrap();
    assert_eq!((r["user"].clone(), r["groups"].clone()), (json!("alice"), json!(["ops", "system:authenticated"])));

    // system:masters (kube's always-allowed group) needs no review.
    let n = mock.reviews().len();
    let masters = [("X-Remote-User", "system:kube-aggregator"), ("X-Remote-Group", "system:masters")];
    let a = get_once(api.addr, &pki.proxy("front-proxy-client"), &values, &masters).await;
    assert_eq!(decode(&a).items.len(), 3);
    assert_eq!(mock.reviews().len(), n);

    // What an unknown metric and a bad selector get, once authorized.
    let mut hpa = Conn::open(api.addr, pki.proxy("front-proxy-client")).await.unwrap();
    let a = hpa.get(&format!("{V}/namespaces/ml/gateway_pool_nonsense"), &hpa_headers()).await;
    assert_status(&a, 404, "NotFound");
    assert!(a.body["message"].as_str().unwrap().contains("gateway_pool_signal"), "lists what is served");
    let a = hpa.get(&format!("{values}?labelSelector=pool+in+%28a"), &hpa_headers()).await;
    assert_status(&a, 400, "BadRequest");
    assert!(a.body["message"].as_str().unwrap().contains("expected"), "{:?}", a.body);
    let a =
        hpa.get("/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/gateway_pool_signal/x/y", &hpa_headers()).await;
    assert_status(&a, 404, "NotFound");
    assert_eq!(metrics.requests_with(404, "NotFound"), 2);
    assert_eq!(metrics.requests_with(400, "BadRequest"), 1);

    // The refusals are in the gateway's Prometheus text under their names.
    let mut reg = prometheus_client::registry::Registry::with_prefix("gateway");
    metrics.register(&mut reg);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
    assert!(
        text.contains(r#"gateway_metrics_api_requests_total{code="401",reason="proxy_name_not_allowed"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"gateway_metrics_api_authorization_reviews_total{result="denied"} 1"#), "{text}");
}

#[tokio::test]
async fn selectors_namespaces_discovery_and_openapi() {
    let pki = Pki::new("serve");
    let mut a = pki.serving_args();
    a.extend([
        "--client-ca-file".into(),
        path_str(&pki.dir.write("client-ca.pem", &pki.client_ca.pem)),
        "--authorization-mode".into(),
        "AlwaysAllow".into(),
    ]);
    let (api, _metrics) = start_api(&args(&a), fixed_pools()).await;
    let mut c = Conn::open(api.addr, pki.client("kubectl-user", &["ops"])).await.unwrap();

    let pools = |a: &Answer| -> Vec<String> {
        let mut v: Vec<String> = decode(a).items.iter().map(|i| i.metric_labels["pool"].clone()).collect();
        v.sort();
        v
    };
    for (selector, want) in [
        ("", vec!["batch", "canary", "default"]),
        ("pool%3Ddefault", vec!["default"]),
        ("pool+in+%28batch%2Ccanary%29", vec!["batch", "canary"]),
        ("pool+notin+%28batch%29", vec!["canary", "default"]),
        ("tier", vec!["batch", "default"]),
        ("%21tier", vec!["canary"]),
        ("tier%21%3Donline", vec!["batch", "canary"]),
        ("tier%3Donline%2Cpool%3Dbatch", vec![]),
    ] {
        let got = pools(&c.get(&format!("{V}/namespaces/ml/gateway_pool_signal?labelSelector={selector}"), &[]).await);
        assert_eq!(got, want, "{selector}");
    }
    assert_eq!(pools(&c.get(&format!("{V}/namespaces/other/gateway_pool_signal"), &[]).await), vec!["default"]);
    assert!(pools(&c.get(&format!("{V}/namespaces/nobody/gateway_pool_signal"), &[]).await).is_empty());

    // Each metric, in canonical quantities.
    for (metric, want) in [
        ("gateway_pool_signal", "2500m"),
        ("gateway_pool_signal_queue", "2500m"),
        ("gateway_pool_signal_gpu", "1250m"),
        ("gateway_pool_ready_workers", "2"),
        ("gateway_pool_gpu_memory_used_ratio", "500m"),
    ] {
        let a = c.get(&format!("{V}/namespaces/ml/{metric}?labelSelector=pool%3Ddefault"), &[]).await;
        assert_eq!(a.body["items"][0]["metricName"], metric);
        assert_eq!(a.body["items"][0]["value"], want, "{metric}");
        assert_eq!(a.body["items"][0]["timestamp"], "2023-11-14T22:13:20Z");
    }

    // Discovery: legacy, aggregated v2 (as kube-aggregator asks), 406 for what is not served,
    // 304 for what the caller holds.
    let legacy = c.get("/apis", &[]).await;
    assert_eq!(legacy.body["kind"], "APIGroupList");
    assert_eq!(legacy.body["groups"][0]["preferredVersion"]["groupVersion"], "external.metrics.k8s.io/v1beta1");
    let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let agg = c.get("/apis", &[("accept", v2)]).await;
    assert_eq!(agg.headers["content-type"], v2);
    assert_eq!(agg.body["kind"], "APIGroupDiscoveryList");
    let resources = &agg.body["items"][0]["versions"][0]["resources"];
    assert_eq!(resources.as_array().unwrap().len(), 5);
    assert_eq!(resources[0]["scope"], "Namespaced");
    assert_eq!(resources[0]["responseKind"]["kind"], "ExternalMetricValueList");
    let a = c
        .get("/apis", &[("accept", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList")])
        .await;
    assert_status(&a, 406, "NotAcceptable");
    let etag = agg.headers["etag"].to_str().unwrap().to_owned();
    let again = c.get("/apis", &[("accept", v2), ("if-none-match", &etag)]).await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);

    let group = c.get("/apis/external.metrics.k8s.io", &[]).await;
    assert_eq!(group.body["kind"], "APIGroup");
    let list = c.get(V, &[]).await;
    assert_eq!(list.body["kind"], "APIResourceList");
    assert_eq!(list.body["groupVersion"], "external.metrics.k8s.io/v1beta1");
    for r in list.body["resources"].as_array().unwrap() {
        assert_eq!(r["namespaced"], true);
        assert_eq!(r["kind"], "ExternalMetricValueList");
        assert_eq!(r["verbs"], json!(["get", "list"]));
    }

    // OpenAPI: v2, and v3 through the index's link.
    let v2doc = c.get("/openapi/v2", &[]).await;
    assert_eq!(v2doc.body["swagger"], "2.0");
    let index = c.get("/openapi/v3", &[]).await;
    let link =
        index.body["paths"]["apis/external.metrics.k8s.io/v1beta1"]["serverRelativeURL"].as_str().unwrap().to_owned();
    let v3doc = c.get(&link, &[]).await;
    assert_eq!(v3doc.body["openapi"], "3.0.0");
    assert!(v3doc.body["paths"].get(format!("{V}/namespaces/{{namespace}}/gateway_pool_signal")).is_some());
}

#[tokio::test]
async fn configmap_changes_are_followed() {
    let pki = Pki::new("follow");
    let mock = MockApi::start(&pki.dir, auth_configmap(None, &pki.proxy_ca, &["front-proxy-client"]), &[HPA]).await;
    let kc = path_str(&mock.kubeconfig);
    let mut a = pki.serving_args();
    a.extend(["--authentication-kubeconfig".into(), kc.clone(), "--authorization-kubeconfig".into(), kc]);
    let (api, _) = start_api(&args(&a), fixed_pools()).await;
    let path = format!("{V}/namespaces/ml/gateway_pool_signal");
    let a = get_once(api.addr, &pki.proxy("front-proxy-client"), &path, &hpa_headers()).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    // No client-ca-file in the ConfigMap: client certificates authenticate nobody.
    let a = get_once(api.addr, &pki.client("alice", &[]), &path, &[]).await;
    assert_status(&a, 401, "Unauthorized");

    // The front-proxy CA is rotated in the ConfigMap (and a client CA added).
    let watchers = Arc::clone(&mock.watchers);
    wait_for(|| watchers.load(std::sync::atomic::Ordering::SeqCst) > 0, "ConfigMap watch").await;
    let new_proxy_ca = Ca::new("front-proxy-ca-2");
    mock.set_configmap(2, &auth_configmap(Some(&pki.client_ca), &new_proxy_ca, &["front-proxy-client"]));
    let new_proxy = client_config(&pki.server_ca, Some(&new_proxy_ca.client("front-proxy-client", &[])));
    let started = std::time::Instant::now();
    loop {
        let a = get_once(api.addr, &new_proxy, &path, &hpa_headers()).await;
        if a.status == StatusCode::OK {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "new CA not followed: {:?}", a.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let a = get_once(api.addr, &pki.proxy("front-proxy-client"), &path, &hpa_headers()).await;
    assert_status(&a, 401, "Unauthorized");
    let a = get_once(api.addr, &pki.client("alice", &[]), &path, &[]).await;
    assert_status(&a, 403, "Forbidden");
}

#[tokio::test]
async fn startup_errors_say_what_to_fix() {
    let pki = Pki::new("startup");
    let spawn = |args: Vec<String>| async move {
        let cfg = api_config(&args.iter().map(String::as_str).collect::<Vec<_>>());
        metrics_api::spawn(&cfg, fixed_pools(), Default::default()).await.map(|_| ()).unwrap_err().to_string()
    };
    // Webhook (the default) with no way to reach an API server (unless this runs in a pod).
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        let e = spawn(pki.serving_args()).await;
        assert!(e.contains("--authorization-kubeconfig") && e.contains("AlwaysAllow"), "{e}");
    }
    // A key that does not belong to the certificate.
    let other = pki.server_ca.server();
    let mut a = pki.serving_args();
    a[3] = path_str(&pki.dir.write("other.key", &other.key_pem));
    a.extend(["--authorization-mode".into(), "AlwaysAllow".into()]);
    let e = spawn(a).await;
    assert!(e.contains("certificate and key"), "{e}");
    let e = spawn(vec![
        "--client-ca-file".into(),
        "/nonexistent/ca.pem".into(),
        "--authorization-mode".into(),
        "AlwaysAllow".into(),
    ])
    .await;
    assert!(e.contains("/nonexistent/ca.pem"), "{e}");
}
