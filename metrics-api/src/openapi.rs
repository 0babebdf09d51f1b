//! OpenAPI documents for the aggregator: `/openapi/v2` (Swagger 2.0, merged into the cluster's
//! `/openapi/v2`) and `/openapi/v3` (the group-version index) with
//! `/openapi/v3/apis/external.metrics.k8s.io/v1beta1` (OpenAPI 3.0). Both are built from one
//! description of the paths and types. kube-aggregator downloads them with `If-None-Match` and
//! skips a 404, so they are optional for scaling, but `kubectl explain` and API clients read them.

use serde_json::{Value, json};

use super::doc::Doc;
use super::values::{GROUP, GROUP_VERSION, LIST_KIND, Metric, VERSION};

const LIST: &str = "io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValueList";
const ITEM: &str = "io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValue";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const TIME: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Time";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";

/// Path of the group-version document under `/openapi/v3/`.
pub const V3_GROUP_PATH: &str = "apis/external.metrics.k8s.io/v1beta1";

#[derive(Debug, Clone)]
pub struct OpenApi {
    pub v2: Doc,
    pub v3_index: Doc,
    pub v3_group: Doc,
}

fn schemas(r: &dyn Fn(&str) -> Value) -> Value {
    json!({
        LIST: {
            "description": "ExternalMetricValueList is a list of values for a given metric for some set of labels",
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string", "description": "external.metrics.k8s.io/v1beta1"},
                "kind": {"type": "string", "description": "ExternalMetricValueList"},
                "metadata": r(LIST_META),
                "items": {"type": "array", "description": "value of the metric matching a given set of labels", "items": r(ITEM)},
            },
            "x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION, "kind": LIST_KIND}],
        },
        ITEM: {
            "description": "ExternalMetricValue is a metric value for external metric",
            "type": "object",
            "required": ["metricName", "metricLabels", "timestamp", "value"],
            "properties": {
                "metricName": {"type": "string", "description": "the name of the metric"},
                "metricLabels": {"type": "object", "additionalProperties": {"type": "string"},
                                 "description": "a set of labels that identify a single time series for the metric"},
                "timestamp": r(TIME),
                "window": {"type": "integer", "format": "int64",
                           "description": "the window [timestamp-window, timestamp] the value was computed over; 0 for an instantaneous value"},
                "value": r(QUANTITY),
            },
        },
        QUANTITY: {"type": "string", "description": "A fixed-point number, e.g. 1500m"},
        TIME: {"type": "string", "format": "date-time"},
        LIST_META: {
            "type": "object",
            "properties": {
                "continue": {"type": "string"},
                "remainingItemCount": {"type": "integer", "format": "int64"},
                "resourceVersion": {"type": "string"},
                "selfLink": {"type": "string"},
            },
        },
        STATUS: {
            "description": "Status is a return value for calls that don't return other objects.",
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "code": {"type": "integer", "format": "int32"},
                "message": {"type": "string"},
                "reason": {"type": "string"},
                "status": {"type": "string"},
            },
        },
    })
}

/// One `get` operation per metric; `v3` decides where the schemas and parameters go.
fn paths(r: &dyn Fn(&str) -> Value, v3: bool) -> Value {
    let mut paths = serde_json::Map::new();
    for m in Metric::ALL {
        let ok = if v3 {
            json!({"description": "OK", "content": {"application/json": {"schema": r(LIST)}}})
        } else {
            json!({"description": "OK", "schema": r(LIST)})
        };
        let refused = |what: &str| {
            if v3 {
                json!({"description": what, "content": {"application/json": {"schema": r(STATUS)}}})
            } else {
                json!({"description": what, "schema": r(STATUS)})
            }
        };
        let param = |name: &str, place: &str, desc: &str, required: bool| {
            if v3 {
                json!({"name": name, "in": place, "description": desc, "required": required, "schema": {"type": "string"}})
            } else {
                json!({"name": name, "in": place, "description": desc, "required": required, "type": "string"})
            }
        };
        let mut op = json!({
            "description": m.description(),
            "operationId": format!("listExternalMetricsV1beta1Namespaced_{}", m.name()),
            "tags": ["externalMetrics_v1beta1"],
            "parameters": [
                param("namespace", "path", "the namespace of the pools", true),
                param("labelSelector", "query", "a label selector over the pools' labels (at least `pool`)", false),
            ],
            "responses": {"200": ok, "400": refused("BadRequest"), "401": refused("Unauthorized"), "403": refused("Forbidden")},
            "x-kubernetes-action": "list",
            "x-kubernetes-group-version-kind": {"group": GROUP, "version": VERSION, "kind": LIST_KIND},
        });
        if !v3 {
            op["produces"] = json!(["application/json"]);
            op["schemes"] = json!(["https"]);
        }
        paths.insert(format!("/apis/{GROUP_VERSION}/namespaces/{{namespace}}/{}", m.name()), json!({"get": op}));
    }
    Value::Object(paths)
}

impl OpenApi {
    pub fn new() -> Self {
        let info = json!({"title": "gateway: external metrics", "version": VERSION});
        let v2_ref = |name: &str| json!({"$ref": format!("#/definitions/{name}")});
        let v3_ref = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
        let v2 = json!({
            "swagger": "2.0",
            "info": info,
            "paths": paths(&v2_ref, false),
            "definitions": schemas(&v2_ref),
        });
        let v3_group = json!({
            "openapi": "3.0.0",
            "info": info,
            "paths": paths(&v3_ref, true),
            "components": {"schemas": schemas(&v3_ref)},
        });
        let v3_group = Doc::json(&v3_group, "application/json");
        let v3_index = json!({
            "paths": {
                V3_GROUP_PATH: {"serverRelativeURL": format!("/openapi/v3/{V3_GROUP_PATH}?hash={}", v3_group.hash())},
            },
        });
        Self { v2: Doc::json(&v2, "application/json"), v3_index: Doc::json(&v3_index, "application/json"), v3_group }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` in both documents points at a schema they define.
    #[test]
    fn references_resolve() {
        let api = OpenApi::new();
        for (doc, prefix, defs) in [
            (&api.v2, "#/definitions/", "/definitions"),
            (&api.v3_group, "#/components/schemas/", "/components/schemas"),
        ] {
            let v: Value = serde_json::from_slice(doc.body()).unwrap();
            let text = v.to_string();
            let mut n = 0;
            for part in text.split("\"$ref\":\"").skip(1) {
                let target = &part[..part.find('"').unwrap()];
                let name = target.strip_prefix(prefix).unwrap_or_else(|| panic!("{target}"));
                assert!(v.pointer(defs).unwrap().get(name).is_some(), "{target}");
                n += 1;
            }
            assert!(n > 10);
            assert_eq!(v["paths"].as_object().unwrap().len(), Metric::ALL.len());
        }
        let index: Value = serde_json::from_slice(api.v3_index.body()).unwrap();
        let url = index["paths"][V3_GROUP_PATH]["serverRelativeURL"].as_str().unwrap();
        assert!(url.ends_with(api.v3_group.hash()));
    }
}
