//! Discovery documents: the legacy ones (`/apis`, `/apis/{group}`, `/apis/{group}/{version}`)
//! that the aggregator and kubectl fall back to, and aggregated discovery
//! (`apidiscovery.k8s.io/v2`), which kube-aggregator 1.30+ asks `/apis` for first.
//!
//! kube-aggregator (`pkg/apiserver/handler_discovery.go`) uses an aggregated answer only when it
//! is a 200 whose `Content-Type` names the v2 `APIGroupDiscoveryList`; 304 keeps its cached copy;
//! 503 is an error; anything else (our 406 for an `Accept` we cannot meet, or a 200 in plain
//! JSON) makes it fetch `/apis/{group}/{version}` instead. Serving v2 saves that second request.
//! Each metric is a namespaced resource with verbs `get` and `list` and the response kind
//! `ExternalMetricValueList`, as custom-metrics-apiserver lists external metrics.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery,
};
use serde_json::json;

use super::doc::{AGGREGATED_V2, Doc};
use super::values::{GROUP, GROUP_VERSION, LIST_KIND, Metric, VERSION};

const VERBS: [&str; 2] = ["get", "list"];

/// Every discovery document, serialized once.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub group_list: Doc,
    pub group: Doc,
    pub resources: Doc,
    pub aggregated: Doc,
}

fn group() -> APIGroup {
    let gv = GroupVersionForDiscovery { group_version: GROUP_VERSION.to_owned(), version: VERSION.to_owned() };
    APIGroup { name: GROUP.to_owned(), preferred_version: Some(gv.clone()), versions: vec![gv], ..Default::default() }
}

impl Discovery {
    pub fn new() -> Self {
        let group_list = APIGroupList { groups: vec![group()] };
        let resources = APIResourceList {
            group_version: GROUP_VERSION.to_owned(),
            resources: Metric::ALL
                .iter()
                .map(|m| APIResource {
                    name: m.name().to_owned(),
                    singular_name: String::new(),
                    namespaced: true,
                    kind: LIST_KIND.to_owned(),
                    verbs: VERBS.iter().map(|v| (*v).to_owned()).collect(),
                    ..Default::default()
                })
                .collect(),
        };
        let aggregated = json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {},
            "items": [{
                "metadata": {"name": GROUP, "creationTimestamp": null},
                "versions": [{
                    "version": VERSION,
                    "resources": Metric::ALL.iter().map(|m| json!({
                        "resource": m.name(),
                        "responseKind": {"group": GROUP, "version": VERSION, "kind": LIST_KIND},
                        "scope": "Namespaced",
                        "singularResource": "",
                        "verbs": VERBS,
                    })).collect::<Vec<_>>(),
                    "freshness": "Current",
                }],
            }],
        });
        Self {
            group_list: Doc::json(&group_list, "application/json"),
            group: Doc::json(&group(), "application/json"),
            resources: Doc::json(&resources, "application/json"),
            aggregated: Doc::json(&aggregated, AGGREGATED_V2),
        }
    }
}
