//! Delegated authorization, as an aggregated API server does it: members of `system:masters`
//! are allowed (kube's always-allow group); in `Webhook` mode every other decision is a
//! SubjectAccessReview (`authorization.k8s.io/v1`) of the request's attributes, cached briefly,
//! allowed and denied answers each for their own TTL; in `AlwaysAllow` mode every authenticated
//! user is allowed. The always-allow paths never get here (they skip authentication too).
//!
//! The cache is keyed by user and attributes. Concurrent requests with the same key share one
//! review (a cold cache under 100 clients sends one SubjectAccessReview, not 100). A failed
//! review is not cached: its waiters get the error (500 `InternalError`, as kube answers an
//! authorizer error), the next request asks again. The cache holds at most `MAX_ENTRIES` keys;
//! past that, expired entries are dropped, then everything.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::authn::User;
use super::metrics::ApiMetrics;
use super::request_info::Attributes;

const MAX_ENTRIES: usize = 10_000;
/// kube's always-allow group.
pub const PRIVILEGED_GROUP: &str = "system:masters";

/// A review's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub allowed: bool,
    pub reason: String,
}

/// Answers SubjectAccessReviews (the API server, or a test double).
pub trait Reviewer: Send + Sync + 'static {
    fn review(&self, spec: SubjectAccessReviewSpec) -> BoxFuture<'static, Result<Review, String>>;
}

/// SubjectAccessReviews through a kube client, with a timeout and one retry.
pub struct KubeReviewer {
    pub client: kube::Client,
    pub timeout: Duration,
}

impl Reviewer for KubeReviewer {
    fn review(&self, spec: SubjectAccessReviewSpec) -> BoxFuture<'static, Result<Review, String>> {
        let api: kube::Api<SubjectAccessReview> = kube::Api::all(self.client.clone());
        let timeout = self.timeout;
        Box::pin(async move {
            let sar = SubjectAccessReview { spec, ..Default::default() };
            let mut last = String::new();
            for attempt in 0..2 {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                match tokio::time::timeout(timeout, api.create(&kube::api::PostParams::default(), &sar)).await {
                    Ok(Ok(done)) => {
                        let status = done.status.unwrap_or_default();
                        let mut reason = status.reason.unwrap_or_default();
                        if let Some(e) = status.evaluation_error.filter(|e| !e.is_empty()) {
                            reason = if reason.is_empty() { e } else { format!("{reason}; {e}") };
                        }
                        return Ok(Review { allowed: status.allowed, reason });
                    }
                    Ok(Err(e)) => last = e.to_string(),
                    Err(_) => last = format!("no answer within {timeout:?}"),
                }
            }
            Err(last)
        })
    }
}

/// What the authorizer decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied(String),
    /// The API server could not be asked (detail for the log).
    Unavailable(String),
}

type Key = (User, Attributes);

#[derive(Default)]
struct Slot {
    answer: OnceCell<(Result<Review, String>, Instant)>,
}

/// `AlwaysAllow`, or `Webhook` with its cache.
pub struct Authorizer(Mode);

enum Mode {
    AlwaysAllow,
    Webhook {
        reviewer: Arc<dyn Reviewer>,
        allow_ttl: Duration,
        deny_ttl: Duration,
        cache: Mutex<HashMap<Key, Arc<Slot>>>,
    },
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Mode::AlwaysAllow => f.write_str("AlwaysAllow"),
            Mode::Webhook { allow_ttl, deny_ttl, .. } => {
                f.debug_struct("Webhook").field("allow_ttl", allow_ttl).field("deny_ttl", deny_ttl).finish()
            }
        }
    }
}

impl Authorizer {
    pub fn always_allow() -> Self {
        Self(Mode::AlwaysAllow)
    }

    pub fn webhook(reviewer: Arc<dyn Reviewer>, allow_ttl: Duration, deny_ttl: Duration) -> Self {
        Self(Mode::Webhook { reviewer, allow_ttl, deny_ttl, cache: Mutex::new(HashMap::new()) })
    }

    pub async fn authorize(&self, user: &User, attrs: &Attributes, metrics: &ApiMetrics) -> Decision {
        if user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
            return Decision::Allowed;
        }
        let Mode::Webhook { reviewer, allow_ttl, deny_ttl, cache } = &self.0 else {
            return Decision::Allowed;
        };
        let expired = |slot: &Slot, now: Instant| match slot.answer.get() {
            None => false,
            Some((Err(_), _)) => true,
            Some((Ok(r), at)) => now.duration_since(*at) >= if r.allowed { *allow_ttl } else { *deny_ttl },
        };
        let key = (user.clone(), attrs.clone());
        let slot = {
            let mut map = match cache.lock() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            let now = Instant::now();
            match map.get(&key) {
                Some(s) if !expired(s, now) => Arc::clone(s),
                _ => {
                    if map.len() >= MAX_ENTRIES {
                        map.retain(|_, s| !expired(s, now));
                        if map.len() >= MAX_ENTRIES {
                            map.clear();
                        }
                    }
                    let s = Arc::new(Slot::default());
                    map.insert(key, Arc::clone(&s));
                    s
                }
            }
        };
        let mut asked = false;
        let (answer, _) = slot
            .answer
            .get_or_init(|| {
                asked = true;
                let review = reviewer.review(spec(user, attrs));
                async move { (review.await, Instant::now()) }
            })
            .await;
        ApiMetrics::result(&metrics.review_cache, if asked { "miss" } else { "hit" });
        if asked {
            let result = match answer {
                Ok(r) if r.allowed => "allowed",
                Ok(_) => "denied",
                Err(_) => "error",
            };
            ApiMetrics::result(&metrics.reviews, result);
        }
        match answer {
            Ok(r) if r.allowed => Decision::Allowed,
            Ok(r) => Decision::Denied(r.reason.clone()),
            Err(e) => Decision::Unavailable(e.clone()),
        }
    }
}

/// The review of `user` doing `attrs`, as kube's webhook authorizer writes it.
pub fn spec(user: &User, attrs: &Attributes) -> SubjectAccessReviewSpec {
    let (resource_attributes, non_resource_attributes) = match attrs {
        Attributes::Resource { verb, group, version, namespace, resource, subresource, name } => (
            Some(ResourceAttributes {
                verb: Some(verb.clone()),
                group: Some(group.clone()),
                version: Some(version.clone()),
                namespace: Some(namespace.clone()).filter(|s| !s.is_empty()),
                resource: Some(resource.clone()),
                subresource: Some(subresource.clone()).filter(|s| !s.is_empty()),
                name: Some(name.clone()).filter(|s| !s.is_empty()),
                ..Default::default()
            }),
            None,
        ),
        Attributes::NonResource { verb, path } => {
            (None, Some(NonResourceAttributes { path: Some(path.clone()), verb: Some(verb.clone()) }))
        }
    };
    SubjectAccessReviewSpec {
        user: Some(user.name.clone()),
        groups: Some(user.groups.clone()),
        extra: Some(user.extra.clone()).filter(|e: &BTreeMap<_, _>| !e.is_empty()),
        resource_attributes,
        non_resource_attributes,
        uid: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Allows `alice`, denies everyone else, fails for `flaky`; counts reviews; answers after
    /// 10 ms (virtual).
    struct Fake(Arc<AtomicUsize>);

    impl Reviewer for Fake {
        fn review(&self, spec: SubjectAccessReviewSpec) -> BoxFuture<'static, Result<Review, String>> {
            let n = Arc::clone(&self.0);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                n.fetch_add(1, Ordering::SeqCst);
                match spec.user.as_deref() {
                    Some("alice") => Ok(Review { allowed: true, reason: String::new() }),
                    Some("flaky") => Err("connection refused".to_owned()),
                    _ => Ok(Review { allowed: false, reason: "no RBAC rule".to_owned() }),
                }
            })
        }
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User { name: name.into(), groups: groups.iter().map(|g| (*g).to_owned()).collect(), extra: BTreeMap::new() }
    }

    fn list(ns: &str) -> Attributes {
        Attributes::Resource {
            verb: "list".into(),
            group: "external.metrics.k8s.io".into(),
            version: "v1beta1".into(),
            namespace: ns.into(),
            resource: "gateway_pool_signal".into(),
            subresource: String::new(),
            name: String::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn allowed_and_denied_are_cached_for_their_own_ttl() {
        let n = Arc::new(AtomicUsize::new(0));
        let a = Authorizer::webhook(Arc::new(Fake(Arc::clone(&n))), Duration::from_secs(10), Duration::from_secs(2));
        let m = ApiMetrics::default();
        let (alice, bob) = (user("alice", &[]), user("bob", &[]));
        assert_eq!(a.authorize(&alice, &list("ml"), &m).await, Decision::Allowed);
        assert_eq!(a.authorize(&bob, &list("ml"), &m).await, Decision::Denied("no RBAC rule".into()));
        assert_eq!(n.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(3)).await;
        a.authorize(&alice, &list("ml"), &m).await;
        a.authorize(&bob, &list("ml"), &m).await;
        assert_eq!(n.load(Ordering::SeqCst), 3, "bob's denial expired after 2 s, alice's allowance holds");
        // Another namespace is another question.
        a.authorize(&alice, &list("other"), &m).await;
        assert_eq!(n.load(Ordering::SeqCst), 4);
        tokio::time::advance(Duration::from_secs(8)).await;
        a.authorize(&alice, &list("ml"), &m).await;
        assert_eq!(n.load(Ordering::SeqCst), 5, "alice's allowance expired after 10 s");
        assert_eq!(
            m.review_cache.get_or_create(&super::super::metrics::ResultLabels { result: "hit".into() }).get(),
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_share_one_review() {
        let n = Arc::new(AtomicUsize::new(0));
        let a = Arc::new(Authorizer::webhook(
            Arc::new(Fake(Arc::clone(&n))),
            Duration::from_secs(10),
            Duration::from_secs(10),
        ));
        let m = ApiMetrics::default();
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let (a, m) = (Arc::clone(&a), m.clone());
                tokio::spawn(async move { a.authorize(&user("alice", &[]), &list("ml"), &m).await })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Decision::Allowed);
        }
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn errors_are_not_cached_and_masters_skip_the_review() {
        let n = Arc::new(AtomicUsize::new(0));
        let a = Authorizer::webhook(Arc::new(Fake(Arc::clone(&n))), Duration::from_secs(10), Duration::from_secs(10));
        let m = ApiMetrics::default();
        let flaky = user("flaky", &[]);
        assert!(matches!(a.authorize(&flaky, &list("ml"), &m).await, Decision::Unavailable(_)));
        assert!(matches!(a.authorize(&flaky, &list("ml"), &m).await, Decision::Unavailable(_)));
        assert_eq!(n.load(Ordering::SeqCst), 2);
        assert_eq!(a.authorize(&user("root", &[PRIVILEGED_GROUP]), &list("ml"), &m).await, Decision::Allowed);
        assert_eq!(n.load(Ordering::SeqCst), 2);
        assert_eq!(Authorizer::always_allow().authorize(&user("bob", &[]), &list("ml"), &m).await, Decision::Allowed);
    }

    #[test]
    fn the_review_names_verb_group_resource_and_namespace() {
        let mut u = user("system:serviceaccount:kube-system:horizontal-pod-autoscaler", &["system:authenticated"]);
        u.extra.insert("scopes".into(), vec!["a".into()]);
        let s = serde_json::to_value(spec(&u, &list("ml"))).unwrap();
        assert_eq!(
            s["resourceAttributes"],
            serde_json::json!({"verb": "list", "group": "external.metrics.k8s.io", "version": "v1beta1",
                               "namespace": "ml", "resource": "gateway_pool_signal"})
        );
        assert_eq!(s["groups"], serde_json::json!(["system:authenticated"]));
        assert_eq!(s["extra"], serde_json::json!({"scopes": ["a"]}));
        let n = serde_json::to_value(spec(&u, &Attributes::NonResource { verb: "get".into(), path: "/apis".into() }))
            .unwrap();
        assert_eq!(n["nonResourceAttributes"], serde_json::json!({"path": "/apis", "verb": "get"}));
    }
}
