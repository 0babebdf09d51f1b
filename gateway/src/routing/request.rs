//! A client request as routing is given it: buffered so that it can be sent twice
//! ([`ClientRequest`]), with its estimated [`Cost`], and its one query when it may go to the
//! worker in a merge with others ([`Single`], decided at the predict entry; `coalesce` merges).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderValue, Method};

use crate::pool::Endpoint;
use crate::upstream::Answer;

/// A client request, buffered so that it can be sent twice.
pub(crate) struct ClientRequest<'a> {
    pub(crate) method: Method,
    /// Path and query sent to the worker, e.g. `/predict?query=hi`.
    pub(crate) path_and_query: PathAndQuery,
    pub(crate) content_type: Option<HeaderValue>,
    /// Passed to the worker as they are (`x-request-id`, `traceparent`).
    pub(crate) headers: &'a [(&'static str, &'a HeaderValue)],
    /// Makes the request's log span (its ids), to enter where something is logged about it.
    pub(crate) span: &'a (dyn Fn() -> tracing::Span + Sync),
    pub(crate) body: Bytes,
    /// What it costs, as estimated at admission.
    pub(crate) cost: Cost,
    /// Its one query, when it may go to the worker in a merge with others (`coalesce`).
    pub(crate) single: Option<Single>,
}

/// A request's estimated cost: tokens, and whether that makes it heavy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cost {
    pub(crate) tokens: u64,
    pub(crate) heavy: bool,
    /// Its per-attempt timeout's scale: tokens over `--heavy-request-tokens`, at least 1.
    pub(crate) scale: f64,
    /// Its queries (the signal's unit of demand).
    pub(crate) queries: u64,
}

/// A request that may go in a merge: its one query, and its tokens at most.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Single {
    /// The query as a JSON string (quoted, escaped).
    pub(super) json: String,
    pub(super) tokens: u64,
    /// Set for an Open Inference Protocol inference: its answer is made from the merge's item.
    pub(super) oip: Option<Arc<OipSingle>>,
}

/// An Open Inference Protocol inference of one text, as a merge's member: what its answer needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OipSingle {
    /// The model (and version) it names: it goes in a merge only to a worker serving it.
    pub(crate) model: String,
    pub(crate) version: Option<String>,
    /// The request, its text taken out: the answer's id, shape and outputs.
    pub(crate) call: oip::InferCall,
    /// Where a gRPC call takes its prediction from a merge's answer, to answer in protobuf
    /// without the REST JSON in between (the answer's body is then empty); `None` for REST.
    pub(crate) reply: Option<Arc<OnceLock<wire::Prediction>>>,
}

impl Single {
    /// The query `query` (as the worker decodes it) of at most `tokens` tokens.
    pub(crate) fn new(query: &str, tokens: u64) -> Option<Self> {
        serde_json::to_string(query).ok().map(|json| Self { json, tokens, oip: None })
    }

    /// An Open Inference Protocol inference of the one text `query`, of at most `tokens` tokens.
    pub(crate) fn oip(query: &str, tokens: u64, form: OipSingle) -> Option<Self> {
        Self::new(query, tokens).map(|s| Self { oip: Some(Arc::new(form)), ..s })
    }

    /// Whether it may go in a merge to `ep`: a `/predict` request always, an Open Inference
    /// Protocol one when the worker serves the model it names (else it goes alone, and the
    /// worker answers it as it would).
    pub(crate) fn may_merge_on(&self, ep: &Endpoint) -> bool {
        self.oip.as_ref().is_none_or(|o| ep.serves(&o.model, o.version.as_deref()))
    }

    /// The answer to the request from its item of a merge's 2xx answer `a`: the item itself
    /// for `/predict` (what the worker answers the query alone), the protocol's answer made
    /// from it (by the worker's own function, `oip::answer::rest_json`) for an Open Inference
    /// Protocol request.
    pub(super) fn answer(&self, mut a: Answer) -> Result<Answer, String> {
        let Some(o) = &self.oip else { return Ok(a) };
        let prediction: wire::Prediction =
            serde_json::from_slice(&a.body).map_err(|e| format!("an item that is not a prediction: {e}"))?;
        if let Some(reply) = &o.reply {
            let _ = reply.set(prediction);
            a.body = bytes::Bytes::new();
            return Ok(a);
        }
        a.body =
            oip::answer::rest_json(&o.model, &o.call, std::slice::from_ref(&prediction)).map_err(|e| e.message)?.into();
        Ok(a)
    }

    /// Its estimated tokens at most.
    #[cfg(test)]
    pub(crate) fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Its Open Inference Protocol form, if it is one.
    #[cfg(test)]
    pub(crate) fn oip_form(&self) -> Option<&OipSingle> {
        self.oip.as_deref()
    }
}
