//! What a request asks to do, in the terms a SubjectAccessReview uses, resolved from method and
//! path as kube's `RequestInfoFactory` (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`)
//! does: `GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}` has no name, so
//! its verb is `list` on resource `{metric}` in namespace `{ns}`; `/apis`, `/apis/{group}`,
//! `/apis/{group}/{version}` and `/openapi/...` are non-resource requests (verb = lower-cased
//! method, the path).

use http::Method;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attributes {
    Resource {
        verb: String,
        group: String,
        version: String,
        namespace: String,
        resource: String,
        subresource: String,
        name: String,
    },
    NonResource {
        verb: String,
        path: String,
    },
}

impl Attributes {
    /// kube-apiserver's wording of a refusal of these attributes.
    pub fn forbidden_message(&self, user: &str) -> String {
        match self {
            Self::Resource { verb, group, namespace, resource, subresource, name, .. } => {
                let what = if subresource.is_empty() { resource.clone() } else { format!("{resource}/{subresource}") };
                let object =
                    if name.is_empty() { format!("{what}.{group}") } else { format!("{what}.{group} {name:?}") };
                let scope = if namespace.is_empty() {
                    "at the cluster scope".to_owned()
                } else {
                    format!("in the namespace {namespace:?}")
                };
                format!(
                    "{object} is forbidden: User {user:?} cannot {verb} resource {what:?} in API group {group:?} {scope}"
                )
            }
            Self::NonResource { verb, path } => format!("forbidden: User {user:?} cannot {verb} path {path:?}"),
        }
    }
}

const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// Resolve a request (path without the query; `query` for `watch=`).
pub fn resolve(method: &Method, path: &str, query: Option<&str>) -> Attributes {
    let non_resource = || Attributes::NonResource { verb: method.as_str().to_ascii_lowercase(), path: path.to_owned() };
    let trimmed = path.trim_matches('/');
    let parts: Vec<&str> = if trimmed.is_empty() { Vec::new() } else { trimmed.split('/').collect() };
    if parts.len() < 3 {
        return non_resource();
    }
    let (group, mut rest) = match parts[0] {
        "api" => ("", &parts[1..]),
        "apis" if parts.len() >= 4 => (parts[1], &parts[2..]),
        _ => return non_resource(),
    };
    let version = rest[0];
    rest = &rest[1..];
    let mut verb = match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
    .to_owned();
    let mut via_path = false;
    if let Some(first) = rest.first()
        && SPECIAL_VERBS.contains(first)
        && rest.len() >= 2
    {
        verb = (*first).to_owned();
        rest = &rest[1..];
        via_path = true;
    }
    let mut namespace = String::new();
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = rest[1].to_owned();
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest = &rest[2..];
        }
    }
    let resource = rest.first().map_or("", |s| s).to_owned();
    let name = rest.get(1).map_or("", |s| s).to_owned();
    let subresource =
        if rest.len() >= 3 && !(via_path && verb == "proxy") { rest[2].to_owned() } else { String::new() };
    if name.is_empty() && verb == "get" {
        let watch = query.into_iter().flat_map(|q| q.split('&')).any(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            k == "watch" && !matches!(v.to_ascii_lowercase().as_str(), "false" | "0")
        });
        verb = if watch { "watch" } else { "list" }.to_owned();
    }
    if name.is_empty() && verb == "delete" {
        verb = "deletecollection".to_owned();
    }
    Attributes::Resource {
        group: group.to_owned(),
        version: version.to_owned(),
        verb,
        namespace,
        resource,
        subresource,
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(verb: &str, ns: &str, resource: &str, name: &str) -> Attributes {
        Attributes::Resource {
            verb: verb.into(),
            group: "external.metrics.k8s.io".into(),
            version: "v1beta1".into(),
            namespace: ns.into(),
            resource: resource.into(),
            subresource: String::new(),
            name: name.into(),
        }
    }

    #[test]
    fn metric_reads_are_lists_in_their_namespace() {
        let p = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/gateway_pool_signal";
        assert_eq!(
            resolve(&Method::GET, p, Some("labelSelector=pool%3Da")),
            res("list", "ml", "gateway_pool_signal", "")
        );
        assert_eq!(resolve(&Method::GET, p, Some("watch=true")), res("watch", "ml", "gateway_pool_signal", ""));
        assert_eq!(resolve(&Method::POST, p, None), res("create", "ml", "gateway_pool_signal", ""));
        assert_eq!(resolve(&Method::DELETE, p, None), res("deletecollection", "ml", "gateway_pool_signal", ""));
        assert_eq!(resolve(&Method::GET, &format!("{p}/x"), None), res("get", "ml", "gateway_pool_signal", "x"));
        assert_eq!(
            resolve(&Method::GET, "/apis/external.metrics.k8s.io/v1beta1/gateway_pool_signal", None),
            res("list", "", "gateway_pool_signal", "")
        );
        assert_eq!(
            resolve(&Method::GET, "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml", None),
            res("get", "ml", "namespaces", "ml")
        );
    }

    #[test]
    fn discovery_and_openapi_are_non_resource() {
        for p in [
            "/",
            "/apis",
            "/apis/external.metrics.k8s.io",
            "/apis/external.metrics.k8s.io/v1beta1",
            "/openapi/v2",
            "/openapi/v3/apis/external.metrics.k8s.io/v1beta1",
            "/healthz",
        ] {
            assert_eq!(
                resolve(&Method::GET, p, None),
                Attributes::NonResource { verb: "get".into(), path: p.into() },
                "{p}"
            );
        }
    }

    #[test]
    fn refusals_read_like_kube_apiservers() {
        let a = res("list", "ml", "gateway_pool_signal", "");
        assert_eq!(
            a.forbidden_message("bob"),
            "gateway_pool_signal.external.metrics.k8s.io is forbidden: User \"bob\" cannot list resource \
             \"gateway_pool_signal\" in API group \"external.metrics.k8s.io\" in the namespace \"ml\""
        );
        let n = Attributes::NonResource { verb: "get".into(), path: "/apis".into() };
        assert_eq!(n.forbidden_message("bob"), "forbidden: User \"bob\" cannot get path \"/apis\"");
    }
}
