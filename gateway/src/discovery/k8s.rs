//! Kubernetes discovery: the EndpointSlices of a Service (label
//! `kubernetes.io/service-name`), watched with kube's runtime watcher. Only ready endpoints are
//! used. A watch error keeps the last known set (the watcher retries with backoff); a re-list
//! replaces the set only once it is complete (`InitDone`), so endpoints never flap to empty.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Weak;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::task::JoinHandle;

use crate::error::StartError;
use crate::pool::{PoolMeta, Pools, Targets};

/// `[POOL=]NAMESPACE/SERVICE[:PORT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    pub pool: String,
    pub namespace: String,
    pub service: String,
    /// Port name or number; `None`: the slice's first port.
    pub port: Option<String>,
}

impl ServiceSpec {
    pub fn parse(default_pool: &str, s: &str) -> Result<Self, StartError> {
        let bad = || StartError::Config(format!("--k8s-service {s:?}: expected [POOL=]NAMESPACE/SERVICE[:PORT]"));
        let (pool, rest) = match s.split_once('=') {
            Some((p, r)) => (p.trim().to_owned(), r),
            None => (default_pool.to_owned(), s),
        };
        let (ns, svc) = rest.trim().split_once('/').ok_or_else(bad)?;
        let (svc, port) = match svc.split_once(':') {
            Some((s, p)) => (s, Some(p.to_owned())),
            None => (svc, None),
        };
        if pool.is_empty() || ns.is_empty() || svc.is_empty() {
            return Err(bad());
        }
        Ok(Self { pool, namespace: ns.to_owned(), service: svc.to_owned(), port })
    }

    /// The pool's place: the Service's namespace, labels `pool` and `service`.
    pub fn meta(&self) -> PoolMeta {
        let mut meta = PoolMeta::plain(&self.pool, &self.namespace);
        meta.labels.insert("service".to_owned(), self.service.clone());
        meta
    }

    pub fn source(&self) -> String {
        format!("k8s:{}/{}/{}", self.pool, self.namespace, self.service)
    }
}

/// Where each Service-fed pool belongs. One pool may be fed by several Services, but only from
/// one namespace: the external metrics API answers a request for a namespace with its pools.
pub fn pool_metas(specs: &[ServiceSpec]) -> Result<BTreeMap<String, PoolMeta>, StartError> {
    let mut metas: BTreeMap<String, PoolMeta> = BTreeMap::new();
    for spec in specs {
        match metas.get_mut(&spec.pool) {
            None => {
                metas.insert(spec.pool.clone(), spec.meta());
            }
            Some(m) if m.namespace != spec.namespace => {
                return Err(StartError::Config(format!(
                    "pool {:?} is fed by Services in two namespaces ({} and {}); a pool belongs to one",
                    spec.pool, m.namespace, spec.namespace
                )));
            }
            // Several Services of one namespace: the `service` label would be ambiguous.
            Some(m) => {
                m.labels.remove("service");
            }
        }
    }
    Ok(metas)
}

/// Base URLs of the ready endpoints of one slice.
pub fn ready_urls(slice: &EndpointSlice, port: Option<&str>) -> BTreeSet<String> {
    let ports = slice.ports.as_deref().unwrap_or_default();
    let chosen = match port {
        None => ports.first(),
        Some(p) => ports
            .iter()
            .find(|sp| sp.name.as_deref() == Some(p) || sp.port.map(|n| n.to_string()).as_deref() == Some(p)),
    };
    let Some(port) = chosen.and_then(|p| p.port) else {
        return BTreeSet::new();
    };
    let v6 = slice.address_type == "IPv6";
    slice
        .endpoints
        .iter()
        // Kubernetes: a nil `ready` condition is to be read as ready.
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .flat_map(|e| e.addresses.iter())
        .map(|a| if v6 { format!("http://[{a}]:{port}") } else { format!("http://{a}:{port}") })
        .collect()
}

fn slice_name(s: &EndpointSlice) -> String {
    s.metadata.name.clone().unwrap_or_default()
}

fn publish(pools: &Weak<Pools>, spec: &ServiceSpec, slices: &BTreeMap<String, BTreeSet<String>>) -> bool {
    let Some(p) = pools.upgrade() else {
        return false;
    };
    let urls: BTreeSet<String> = slices.values().flatten().cloned().collect();
    tracing::info!(pool = %spec.pool, service = %spec.service, workers = urls.len(), "endpoint slices changed");
    let mut t = Targets::new();
    t.insert(spec.pool.clone(), urls);
    p.update(&spec.source(), t);
    true
}

/// Watch one Service's EndpointSlices and feed its pool; ends when the pools are gone.
pub fn spawn(client: Client, spec: ServiceSpec, pools: Weak<Pools>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<EndpointSlice> = Api::namespaced(client, &spec.namespace);
        let cfg = watcher::Config::default().labels(&format!("kubernetes.io/service-name={}", spec.service));
        let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
        let mut slices: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut relisting: Option<BTreeMap<String, BTreeSet<String>>> = None;
        let port = spec.port.clone();
        while let Some(ev) = events.next().await {
            let changed = match ev {
                Ok(Event::Init) => {
                    relisting = Some(BTreeMap::new());
                    false
                }
                Ok(Event::InitApply(s)) => {
                    if let Some(r) = relisting.as_mut() {
                        r.insert(slice_name(&s), ready_urls(&s, port.as_deref()));
                    }
                    false
                }
                Ok(Event::InitDone) => {
                    slices = relisting.take().unwrap_or_default();
                    true
                }
                Ok(Event::Apply(s)) => {
                    slices.insert(slice_name(&s), ready_urls(&s, port.as_deref()));
                    true
                }
                Ok(Event::Delete(s)) => {
                    slices.remove(&slice_name(&s));
                    true
                }
                Err(e) => {
                    tracing::warn!(service = %spec.service, error = %e, "EndpointSlice watch failed; keeping the last set");
                    false
                }
            };
            if changed && !publish(&pools, &spec, &slices) {
                return;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_specs_parse() {
        let s = ServiceSpec::parse("d", "big=ml/workers:http").unwrap();
        assert_eq!((s.pool.as_str(), s.namespace.as_str(), s.service.as_str()), ("big", "ml", "workers"));
        assert_eq!(s.port.as_deref(), Some("http"));
        let s = ServiceSpec::parse("d", "ml/workers").unwrap();
        assert_eq!((s.pool.as_str(), s.port.clone()), ("d", None));
        assert!(ServiceSpec::parse("d", "workers").is_err());
    }

    #[test]
    fn service_fed_pools_take_the_service_namespace() {
        let specs = [
            ServiceSpec::parse("d", "gpu=ml/workers").unwrap(),
            ServiceSpec::parse("d", "cpu=ml/cpu-a").unwrap(),
            ServiceSpec::parse("d", "cpu=ml/cpu-b").unwrap(),
        ];
        let metas = pool_metas(&specs).unwrap();
        assert_eq!(metas["gpu"].namespace, "ml");
        assert_eq!(metas["gpu"].labels["pool"], "gpu");
        assert_eq!(metas["gpu"].labels["service"], "workers");
        assert_eq!(metas["cpu"].labels.get("service"), None, "two Services: no single service label");
        let clash = [ServiceSpec::parse("d", "p=a/x").unwrap(), ServiceSpec::parse("d", "p=b/y").unwrap()];
        assert!(pool_metas(&clash).is_err());
    }

    #[test]
    fn only_ready_endpoints_with_the_chosen_port() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "w-abc"},
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9000}, {"name": "http", "port": 8000}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "terminating": true}},
                {"addresses": ["10.0.0.3"]}
            ]
        }))
        .unwrap();
        let urls: Vec<_> = ready_urls(&slice, Some("http")).into_iter().collect();
        assert_eq!(urls, ["http://10.0.0.1:8000", "http://10.0.0.3:8000"]);
        let urls: Vec<_> = ready_urls(&slice, None).into_iter().collect();
        assert_eq!(urls, ["http://10.0.0.1:9000", "http://10.0.0.3:9000"]);
        assert!(ready_urls(&slice, Some("grpc")).is_empty());
    }
}
