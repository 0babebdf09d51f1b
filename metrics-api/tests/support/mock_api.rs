//! A mocked kube-apiserver over HTTPS: SubjectAccessReviews answered from a list of allowed
//! users, and the `extension-apiserver-authentication` ConfigMap (get, list, watch), reached
//! through a kubeconfig it writes.

use super::*;

/// A mocked kube-apiserver: answers SubjectAccessReviews (allowed for the users in `allowed`)
/// and serves the `extension-apiserver-authentication` ConfigMap (get, list, watch).
#[derive(Clone)]
pub struct MockApi {
    pub kubeconfig: PathBuf,
    /// Every review's `spec`, in order.
    pub reviews: Arc<Mutex<Vec<Value>>>,
    pub allowed: Arc<Mutex<HashSet<String>>>,
    configmap: Arc<Mutex<Value>>,
    events: broadcast::Sender<String>,
    pub watchers: Arc<std::sync::atomic::AtomicUsize>,
    _task: Arc<AbortOnDrop>,
}

pub struct AbortOnDrop(JoinHandle<()>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

const CM_NAME: &str = "extension-apiserver-authentication";

fn configmap(rv: u64, data: &BTreeMap<String, String>) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": CM_NAME, "namespace": "kube-system", "resourceVersion": rv.to_string()},
           "data": data})
}

async fn sar(State(api): State<MockApi>, body: Bytes) -> Response {
    let mut review: Value = serde_json::from_slice(&body).unwrap();
    let spec = review["spec"].clone();
    api.reviews.lock().unwrap().push(spec.clone());
    let user = spec["user"].as_str().unwrap_or("").to_owned();
    let allowed = api.allowed.lock().unwrap().contains(&user);
    review["status"] = if allowed {
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"hpa-external-metrics\""})
    } else {
        json!({"allowed": false, "reason": "no RBAC policy matched"})
    };
    (StatusCode::CREATED, axum::Json(review)).into_response()
}

async fn cm_get(State(api): State<MockApi>) -> Response {
    axum::Json(api.configmap.lock().unwrap().clone()).into_response()
}

async fn cm_list(State(api): State<MockApi>, Query(q): Query<BTreeMap<String, String>>) -> Response {
    assert_eq!(q.get("fieldSelector").map(String::as_str), Some("metadata.name=extension-apiserver-authentication"));
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let rx = api.events.subscribe();
        api.watchers.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            match rx.recv().await {
                Ok(line) => Some((Ok::<_, Infallible>(Bytes::from(line + "\n")), rx)),
                Err(_) => None,
            }
        });
        return Response::builder().header("content-type", "application/json").body(Body::from_stream(stream)).unwrap();
    }
    let cm = api.configmap.lock().unwrap().clone();
    let rv = cm["metadata"]["resourceVersion"].clone();
    axum::Json(json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": rv}, "items": [cm]}))
        .into_response()
}

impl MockApi {
    /// Start it; `dir` receives its CA and the kubeconfig that reaches it.
    pub async fn start(dir: &TempDir, cm_data: BTreeMap<String, String>, allowed: &[&str]) -> Self {
        let ca = Ca::new("mock-kube-apiserver-ca");
        let (events, _) = broadcast::channel(16);
        let mut api = Self {
            kubeconfig: PathBuf::new(),
            reviews: Arc::default(),
            allowed: Arc::new(Mutex::new(allowed.iter().map(|s| (*s).to_owned()).collect())),
            configmap: Arc::new(Mutex::new(configmap(1, &cm_data))),
            events,
            watchers: Arc::default(),
            _task: Arc::new(AbortOnDrop(tokio::spawn(async {}))),
        };
        let router = Router::new()
            .route("/apis/authorization.k8s.io/v1/subjectaccessreviews", post(sar))
            .route(&format!("/api/v1/namespaces/kube-system/configmaps/{CM_NAME}"), get(cm_get))
            .route("/api/v1/namespaces/kube-system/configmaps", get(cm_list))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .with_state(api.clone());
        let (addr, task) = serve_tls(router, &ca.server()).await;
        let ca_file = dir.write("mock-apiserver-ca.pem", &ca.pem);
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: mock\n\
             clusters:\n- name: mock\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\n\
             users:\n- name: gateway\n  user:\n    token: gateway-test-token\n\
             contexts:\n- name: mock\n  context:\n    cluster: mock\n    user: gateway\n",
            addr.port(),
            ca_file.display()
        );
        api.kubeconfig = dir.write("mock-apiserver.kubeconfig", &kubeconfig);
        api._task = Arc::new(AbortOnDrop(task));
        api
    }

    /// Replace the ConfigMap's data (a MODIFIED watch event).
    pub fn set_configmap(&self, rv: u64, data: &BTreeMap<String, String>) {
        let cm = configmap(rv, data);
        *self.configmap.lock().unwrap() = cm.clone();
        let _ = self.events.send(json!({"type": "MODIFIED", "object": cm}).to_string());
    }

    pub fn reviews(&self) -> Vec<Value> {
        self.reviews.lock().unwrap().clone()
    }
}

/// The ConfigMap kube-apiserver publishes: client CA, front-proxy CA, allowed names, headers.
pub fn auth_configmap(client_ca: Option<&Ca>, proxy_ca: &Ca, allowed: &[&str]) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if let Some(ca) = client_ca {
        m.insert("client-ca-file".to_owned(), ca.pem.clone());
    }
    m.insert("requestheader-client-ca-file".to_owned(), proxy_ca.pem.clone());
    m.insert("requestheader-allowed-names".to_owned(), serde_json::to_string(allowed).unwrap());
    m.insert("requestheader-username-headers".to_owned(), r#"["X-Remote-User"]"#.to_owned());
    m.insert("requestheader-group-headers".to_owned(), r#"["X-Remote-Group"]"#.to_owned());
    m.insert("requestheader-extra-headers-prefix".to_owned(), r#"["X-Remote-Extra-"]"#.to_owned());
    m
}
