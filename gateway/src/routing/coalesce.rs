//! Coalescing: concurrent single-query `/predict` requests bound for the same worker go to it as
//! one `POST /predict {"queries": [...]}`, and its list answer is split back into each client's
//! answer: the bytes of the list's item, which are what the worker answers that query alone. The
//! worker batches queries anyway; one exchange for several client requests spares the gateway
//! and the worker an HTTP exchange each (`gateway/README.md`, "Coalescing", has the numbers).
//!
//! *When* requests merge is the worker's queue's policy (`pool::merge_queue`): only requests that
//! are already waiting because the worker has `--coalesce-after-in-flight` exchanges in flight;
//! there is no timer, and a request alone goes at once. *What* may merge is decided at the
//! predict entry ([`Single`]): a single-query `/predict` request, `GET ?query=...` alone or
//! `POST {"query": "..."}`, light, without `all_scores` (the list form takes it for the whole
//! list), or an Open Inference Protocol inference of one text without `logits` (REST or gRPC),
//! merged only to a worker whose stats name its model; never a
//! `{"queries": [...]}` request. A protocol request's answer is made from its item as the worker
//! makes it alone (`oip::answer::rest_json`).
//!
//! Here: one merge is sent ([`Exchange`]), its outcome classified once by the outcome policy and
//! its health effect applied once to the worker (a failed merge is one failure towards
//! `--eject-after`, not one per request), and every member gets exactly one [`Delivery`]; each
//! member then goes on through its own attempt and retry budget in `proxy::forward`, as if sent
//! alone (its admission, deadline, outstanding count and queries sent are its own throughout):
//!
//! | the merge's outcome | each request |
//! |---|---|
//! | 2xx, JSON, exactly one prediction per query | its own item, with the answer's status and `Content-Type` |
//! | 2xx otherwise (not JSON, another shape, a wrong number of items) | retry `malformed` on another worker, else 502 `upstream` |
//! | connection failed, dropped, answer over `--max-answer-bytes` | retry (`connect`, `dropped`, `malformed`), else 502 `upstream` |
//! | answer over the budget of answer bytes | 502 `upstream`, as alone |
//! | 429 | retry `overloaded` on another ready worker, else the worker's 429 with its `Retry-After` |
//! | 503 | retry `unavailable` (a draining worker out of rotation), else 503 with `Retry-After` |
//! | other 5xx, or an error that is not a JSON error | retry `server_error` / `malformed`, else 502 `upstream` |
//! | other 4xx (a query the worker would not take, a limit of its own) | sent alone to the same worker at once (not a retry): the answer the worker gives it alone |
//! | the merge's deadline (its members' latest) passed | each request's own deadline has passed: retry `slow`, or 504 at the request's deadline |
//!
//! A member whose own attempt deadline passes while it waits or while its merge is out goes on
//! without it (retry `slow`, as alone); its part of the merge's answer is then dropped. A member
//! whose client went away before its merge left is skipped, never sent.

use std::sync::Arc;

use http::{HeaderValue, Method};
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::attempt::{Attempt, Sent, alone, apply, conclude};
use super::request::{ClientRequest, Single};
use crate::ctx::Ctx;
use crate::pool::merge_queue::{Arrival, BODY_OVERHEAD, Delivery, Member, Policy};
use crate::pool::outcome::{self, CallKind, HealthEffect, Outcome, RetryReason, Verdict};
use crate::pool::{Endpoint, Pool};
use crate::upstream::{Answer, Limit, Outgoing};

/// One attempt of a mergeable request on `ep`: alone at once, or in a merge (see the module
/// documentation), until `deadline` (`.1`: the request's own).
pub(super) async fn attempt(
    pool: &Pool,
    ep: &Arc<Endpoint>,
    req: &ClientRequest<'_>,
    single: &Single,
    deadline: (Instant, bool),
    policy: &Policy,
) -> Attempt {
    let ctx = pool.ctx();
    let (tx, rx) = oneshot::channel();
    let member = Member { json: single.json.clone(), tokens: single.tokens, deadline: deadline.0, answer: tx };
    // The calling core's queue: requests merge with others of the same core, and the merge goes
    // out on that core's connections (`Endpoint`'s shares).
    let slot = ep.slot();
    let arrival = ep.coalesce(slot).arrive(member, policy);
    match arrival {
        // An inference of one text going alone goes as a list of one to the worker's `/predict`
        // (its fast route, and the answer made from the item, as a merge's member's is) rather
        // than to the worker's inference route with its JSON body. A refusal of it (a 4xx) sends
        // the request again as it came, for the worker's own answer to it.
        Arrival::Alone(member) if single.oip.is_some() => {
            send(Arc::clone(ctx), Arc::clone(ep), slot, *policy, vec![member]);
        }
        Arrival::Alone(member) => {
            drop(member);
            // Counted in flight at the worker's queue until it ends.
            let _exchange = InFlight { ctx, ep, slot, policy };
            return alone(pool, ep, req, deadline).await;
        }
        Arrival::Merge(members) => send(Arc::clone(ctx), Arc::clone(ep), slot, *policy, members),
        Arrival::Wait => {}
    }
    let since = Instant::now();
    match tokio::time::timeout_at(deadline.0, rx).await {
        Ok(Ok(Delivery::Done { verdict, result })) => {
            let (verdict, sent) = match result {
                Ok((a, error_type)) if a.status.is_success() && verdict == Verdict::Answer => match single.answer(a) {
                    Ok(a) => (verdict, Sent::Answer(a, error_type)),
                    Err(why) => (Verdict::Retry(RetryReason::Malformed), Sent::Failed(format!("{}: {why}", ep.url))),
                },
                Ok((a, error_type)) => (verdict, Sent::Answer(a, error_type)),
                Err(detail) => (verdict, Sent::Failed(detail)),
            };
            conclude(ep, ctx, verdict, sent)
        }
        Ok(Ok(Delivery::Alone)) => alone(pool, ep, req, deadline).await,
        Ok(Ok(Delivery::TimedOut)) | Err(_) => {
            // As alone: the time waited is a latency sample, never a failure.
            let o = Outcome::TimedOut { waited: since.elapsed(), whole_request: deadline.1 };
            let c = outcome::classify(CallKind::Predict, &o);
            apply(ep, c.health, ctx, &"timeout", Some(req.span));
            conclude(ep, ctx, c.verdict, Sent::TimedOut)
        }
        // The merge was dropped without a word (the runtime is shutting down).
        Ok(Err(_)) => {
            let detail = format!("{}: merged request abandoned", ep.url);
            conclude(ep, ctx, Verdict::Retry(RetryReason::Dropped), Sent::Failed(detail))
        }
    }
}

/// Send `members` to `ep` as one merge, on a task of its own: no client's request carries it, so
/// none going away can leave the others without an answer.
fn send(ctx: Arc<Ctx>, ep: Arc<Endpoint>, slot: usize, policy: Policy, members: Vec<Member>) {
    let exchange = Exchange { ctx, ep, slot, policy };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(async move { exchange.run(members).await });
        }
        // No runtime (shutting down): the members hear nothing and end as abandoned.
        Err(_) => drop((exchange, members)),
    }
}

/// One exchange counted in flight at a worker's queue: when it ends (dropped, however it ends),
/// the next merge waiting for the worker goes.
struct Exchange {
    ctx: Arc<Ctx>,
    ep: Arc<Endpoint>,
    /// The core whose queue it is counted in.
    slot: usize,
    policy: Policy,
}

impl Drop for Exchange {
    fn drop(&mut self) {
        finished(&self.ctx, &self.ep, self.slot, &self.policy);
    }
}

/// A request sent alone, counted in flight at the worker's queue as an exchange is: borrowed from
/// the request, so that going alone takes no reference count (the common case, with a few
/// requests in flight).
struct InFlight<'a> {
    ctx: &'a Arc<Ctx>,
    ep: &'a Arc<Endpoint>,
    slot: usize,
    policy: &'a Policy,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        finished(self.ctx, self.ep, self.slot, self.policy);
    }
}

/// An exchange of core `slot` with `ep` ended: the merge waiting for it, if any, goes.
fn finished(ctx: &Arc<Ctx>, ep: &Arc<Endpoint>, slot: usize, policy: &Policy) {
    let next = ep.coalesce(slot).finished(policy);
    if let Some(members) = next {
        send(Arc::clone(ctx), Arc::clone(ep), slot, *policy, members);
    }
}

impl Exchange {
    /// Send the merge, classify its outcome once, apply its health effect once, and deliver
    /// each member its part.
    async fn run(self, members: Vec<Member>) {
        let (ctx, ep) = (&self.ctx, &self.ep);
        ep.coalesced_exchanges.inc();
        ep.coalesced_requests.inc_by(members.len() as u64);
        let body = merged_body(&members);
        let deadline = members.iter().map(|m| m.deadline).max().unwrap_or_else(Instant::now);
        let content_type = HeaderValue::from_static("application/json");
        let out = Outgoing {
            method: &Method::POST,
            path_and_query: "/predict",
            content_type: Some(&content_type),
            headers: &[],
            body: &body,
        };
        let limit = Limit { max_bytes: ctx.config.max_answer_bytes, budget: Some(&ctx.answers) };
        let sent = Instant::now();
        match tokio::time::timeout_at(deadline, outcome::send(&ep.upstream, out, limit)).await {
            Err(_) => {
                apply(ep, HealthEffect::Slow { waited: sent.elapsed() }, ctx, &"timeout", None);
                for m in members {
                    let _ = m.answer.send(Delivery::TimedOut);
                }
            }
            Ok(Err(e)) => {
                let c = outcome::classify(CallKind::Predict, &Outcome::Failed(&e));
                apply(ep, c.health, ctx, &e, None);
                let detail = format!("{}: {e}", ep.url);
                for m in members {
                    let _ = m.answer.send(Delivery::Done { verdict: c.verdict, result: Err(detail.clone()) });
                }
            }
            Ok(Ok(a)) => self.answered(members, a, sent.elapsed()),
        }
    }

    /// The worker answered the merge.
    fn answered(&self, members: Vec<Member>, a: Answer, rtt: std::time::Duration) {
        let (ctx, ep) = (&self.ctx, &self.ep);
        if a.status.is_success() {
            let status = a.status;
            match split(a, members.len()) {
                Ok(parts) => {
                    let o = Outcome::Answered { status, error_type: None, rtt };
                    let c = outcome::classify(CallKind::Predict, &o);
                    apply(ep, c.health, ctx, &"answer", None);
                    for (m, part) in members.into_iter().zip(parts) {
                        let _ = m.answer.send(Delivery::Done { verdict: c.verdict, result: Ok((part, None)) });
                    }
                }
                Err(why) => {
                    self.malformed(members, &format!("{}: malformed answer {}: {why}", ep.url, status.as_u16()))
                }
            }
            return;
        }
        // An error: a 503's `error_type` is read as alone; any other must be a JSON error.
        let checked = if a.status == http::StatusCode::SERVICE_UNAVAILABLE {
            Ok(serde_json::from_slice::<wire::ErrorBody>(&a.body).ok().map(|b| b.error_type))
        } else {
            outcome::well_formed(&a, false)
        };
        let Ok(error_type) = checked else {
            return self.malformed(members, &format!("{}: malformed answer {}", ep.url, a.status.as_u16()));
        };
        if a.status.is_client_error() && a.status != http::StatusCode::TOO_MANY_REQUESTS {
            // The worker would not take the merge as a request: each goes alone, for its own
            // answer (nothing is said of the worker's health here; the requests alone will).
            for m in members {
                let _ = m.answer.send(Delivery::Alone);
            }
            return;
        }
        let c = outcome::classify(CallKind::Predict, &Outcome::Answered { status: a.status, error_type, rtt });
        apply(ep, c.health, ctx, &"server error", None);
        // Each gets the worker's answer (a 429 goes through with its `Retry-After` if it goes
        // nowhere else): one body shared, its charge with the first.
        let mut charge = a.charge;
        for m in members {
            let copy = Answer {
                status: a.status,
                content_type: a.content_type.clone(),
                retry_after: a.retry_after.clone(),
                body: a.body.clone(),
                charge: charge.take(),
            };
            let _ = m.answer.send(Delivery::Done { verdict: c.verdict, result: Ok((copy, error_type)) });
        }
    }

    /// The worker's answer to the merge is not one a worker gives: the worker is failing; each
    /// member may go elsewhere.
    fn malformed(&self, members: Vec<Member>, detail: &str) {
        let c = outcome::classify(CallKind::Predict, &Outcome::Malformed);
        apply(&self.ep, c.health, &self.ctx, &"malformed answer", None);
        for m in members {
            let _ = m.answer.send(Delivery::Done { verdict: c.verdict, result: Err(detail.to_owned()) });
        }
    }
}

/// `{"queries":[q1,q2,...]}`.
fn merged_body(members: &[Member]) -> Vec<u8> {
    let len = members.iter().map(|m| m.json.len() + 1).sum::<usize>() + BODY_OVERHEAD;
    let mut body = Vec::with_capacity(len);
    body.extend_from_slice(b"{\"queries\":[");
    for (i, m) in members.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(m.json.as_bytes());
    }
    body.extend_from_slice(b"]}");
    body
}

/// The worker's list answer: each item's text as it is in the body.
#[derive(serde::Deserialize)]
struct Batch<'a> {
    #[serde(borrow)]
    predictions: Vec<&'a RawValue>,
}

/// An item must have an `intent` and a numeric `score`, as a worker's prediction has (read
/// without keeping them, as `pool::outcome::well_formed` reads a single answer).
#[derive(serde::Deserialize)]
struct Item {
    #[serde(rename = "intent")]
    _intent: serde::de::IgnoredAny,
    #[serde(rename = "score")]
    _score: f64,
}

/// The worker's 2xx answer `a` to a merge of `n` queries, split into one answer per query, in
/// order: the status, `Content-Type` and `Retry-After` (if any) of `a`, and as body the bytes
/// of the list's item (what the worker answers the query alone: it writes both with the same
/// serializer). The charge of `a` in the budget of answers is split with it. An answer that is
/// not JSON, not a list of predictions, or not one per query is refused (why).
fn split(a: Answer, n: usize) -> Result<Vec<Answer>, String> {
    let json = a.content_type.as_ref().is_some_and(|v| {
        let essence = v.as_bytes().split(|&b| b == b';').next().unwrap_or_default().trim_ascii();
        essence.eq_ignore_ascii_case(b"application/json")
    });
    if !json {
        return Err("not JSON".to_owned());
    }
    let not_a_list = |e: serde_json::Error| format!("not a list of predictions: {e}");
    let batch: Batch<'_> = serde_json::from_slice(&a.body).map_err(not_a_list)?;
    for item in &batch.predictions {
        serde_json::from_str::<Item>(item.get()).map_err(not_a_list)?;
    }
    if batch.predictions.len() != n {
        return Err(format!("{} predictions for {n} queries", batch.predictions.len()));
    }
    let mut charge = a.charge;
    Ok(batch
        .predictions
        .into_iter()
        .map(|item| Answer {
            status: a.status,
            content_type: a.content_type.clone(),
            retry_after: a.retry_after.clone(),
            charge: charge.as_mut().map(|c| c.split_off(item.get().len())),
            body: a.body.slice_ref(item.get().as_bytes()),
        })
        .collect())
}

#[cfg(test)]
mod tests;
