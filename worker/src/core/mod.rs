//! The worker's core, between HTTP and batching (the role text-embeddings-inference's
//! `core/infer.rs` plays): it validates a request's queries, admits them, tokenizes them, queues
//! them for the batcher, waits for their logits and turns those into predictions.
//!
//! The HTTP layer above only parses requests and maps [`CoreError`]s to answers; the batching
//! engine below knows nothing of requests, labels or HTTP.

pub mod admission;
mod error;
mod lanes;
mod observer;
pub mod postprocess;

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::try_join_all;
use smallvec::{SmallVec, smallvec};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use wire::{Prediction, QueueStats};
use wordpiece::Encoder;

pub use admission::{Admission, Capacity, Class};
pub use error::CoreError;

use crate::backend::Backend;
use crate::batching::{Entry, Limits, Tokens, Unanswered};
use crate::metrics::Metrics;
use crate::stats::Stats;

/// Requests with at most this many bytes of queries are tokenized on the runtime thread when
/// `tokenizers` tokenizes...
const INLINE_TOKENIZE_BYTES: usize = 512;
/// ... and this many with the `wordpiece` encoder, far cheaper a query: up to this size it costs
/// less than a blocking-pool hand-off and its wake-ups cost in CPU under load
/// (`benches/RESULTS.md`, "Tokenizer").
const INLINE_TOKENIZE_BYTES_FAST: usize = 16 * 1024;

/// The deadline of a request timeout too long for the clock, as `tokio::time::timeout` sets it.
const FAR_FUTURE: Duration = Duration::from_secs(86400 * 365 * 30);

/// A request's queries. Most requests have one: it, its tokens, its logits and its prediction
/// each stay inline (no allocation for the list).
pub type Queries = SmallVec<[String; 1]>;
/// One per query, in the order of the request's queries.
pub type PerQuery<T> = SmallVec<[T; 1]>;

/// What a prediction holds beyond the most likely label and its score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Detail {
    /// Every label's probability (`/predict`'s `all_scores`).
    pub all_scores: bool,
    /// The model's raw outputs (the Open Inference Protocol's `logits` output).
    pub logits: bool,
}

/// Whose queries: a client's, counted as traffic, or the calibration's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Traffic {
    Client,
    Synthetic,
}

/// Per-request bounds.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub max_queries: usize,
    pub max_query_bytes: usize,
    /// Tokens a query is cut to (the tokenizer's truncation).
    pub max_query_tokens: usize,
    pub request_timeout: Duration,
}

/// What the core is made of; see [`Core::start`].
#[derive(Debug)]
pub struct Parts {
    pub encoder: Encoder,
    /// Class labels in the model's output order.
    pub labels: Vec<String>,
    pub limits: RequestLimits,
    pub batch_limits: Limits,
    /// Most queries and tokens admitted at once, and the size of a heavy request.
    pub capacity: Capacity,
    /// Backend sessions per lane, by [`Class`] (each at least one).
    pub sessions: [usize; 2],
    pub stats: Arc<Stats>,
    pub metrics: Arc<Metrics>,
}

#[derive(Debug)]
pub struct Core {
    encoder: Arc<Encoder>,
    labels: Arc<[String]>,
    admission: Arc<Admission>,
    /// The capacities the flags set: the floors of [`size_admission`](Self::size_admission).
    floor: Capacity,
    /// Each lane's queue, by [`Class`].
    lanes: [mpsc::Sender<Entry>; 2],
    limits: RequestLimits,
    batch_limits: Limits,
    /// Backend sessions per lane, by [`Class`].
    sessions: [usize; 2],
    stats: Arc<Stats>,
    metrics: Arc<Metrics>,
    draining: AtomicBool,
    /// The lanes' backend threads, until [`take_backend_threads`](Self::take_backend_threads).
    backend_threads: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Core {
    /// Starts a lane per [`Class`] (a batching task and a backend thread per session each);
    /// `make_backend` makes each session's backend on that session's thread (`None`: it could not, and has said why).
    /// Must be called within a tokio runtime.
    pub fn start<B, F>(parts: Parts, make_backend: F) -> std::io::Result<Self>
    where
        B: Backend,
        F: Fn(Class) -> Option<B> + Send + Sync + 'static,
    {
        let Parts { encoder, labels, limits, batch_limits, capacity, sessions, stats, metrics } = parts;
        let admission = Arc::new(Admission::new(capacity));
        let shared = lanes::Shared {
            batch_limits,
            queue_capacity: usize::try_from(admission::MAX_QUERIES).unwrap_or(usize::MAX),
            admission: admission.clone(),
            stats: stats.clone(),
            metrics: metrics.clone(),
            sessions,
            make_backend: Arc::new(make_backend),
        };
        let (light, mut threads) = lanes::start(Class::Light, &shared)?;
        let (heavy, heavy_threads) = lanes::start(Class::Heavy, &shared)?;
        threads.extend(heavy_threads);
        Ok(Self {
            encoder: Arc::new(encoder),
            labels: labels.into(),
            admission,
            floor: capacity,
            lanes: [light, heavy],
            limits,
            batch_limits,
            sessions,
            stats,
            metrics,
            draining: AtomicBool::new(false),
            backend_threads: std::sync::Mutex::new(threads),
        })
    }

    /// The lanes' backend threads (once; later calls get none). Each ends after the last handle
    /// of this core is dropped, once it has dropped its backend: with CUDA, the session's state
    /// on the GPU, which has to go before the process's exit tears the driver down.
    pub fn take_backend_threads(&self) -> Vec<std::thread::JoinHandle<()>> {
        std::mem::take(&mut *self.backend_threads.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Real tokens of `q` as this core tokenizes it (0 when it cannot).
    pub fn count_tokens(&self, q: &str) -> usize {
        encode(&self.encoder, q).map_or(0, |t| t.ids().len())
    }

    /// Backend sessions of the light lane (those that run batches side by side).
    pub fn light_sessions(&self) -> usize {
        self.sessions[Class::Light as usize]
    }

    /// Readiness turns false and new work is refused; accepted work goes on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Sizes the admission's capacities from this worker's capacity, `per_s` queries per second
    /// of `tokens_per_query` tokens (see [`admission::sized`]); returns them.
    pub fn size_admission(&self, per_s: f64, tokens_per_query: Option<f64>) -> Capacity {
        let sized = admission::sized(self.floor, per_s, tokens_per_query, self.limits.request_timeout);
        self.admission.resize(sized);
        sized
    }

    /// Clients' queries answered since the start (not the calibration's).
    pub fn answered_total(&self) -> u64 {
        self.stats.completed_total()
    }

    /// Queries admitted and not yet answered.
    pub fn outstanding(&self) -> u64 {
        self.admission.outstanding()
    }

    pub fn queue_stats(&self) -> QueueStats {
        self.admission.stats(self.batch_limits)
    }

    /// Classifies `queries`, in order: validates, admits their queries (or refuses at once with
    /// [`CoreError::Overloaded`]), tokenizes, admits their tokens in their class (or refuses),
    /// queues them in their class's lane, and waits for the batches, at most the request timeout.
    /// A short request is tokenized first, and admitted in one step with its exact tokens.
    pub async fn predict(&self, queries: Queries, detail: Detail) -> Result<PerQuery<Prediction>, CoreError> {
        self.predict_as(queries, detail, Traffic::Client).await
    }

    /// [`predict`](Self::predict) for the calibration's synthetic queries: the same way through,
    /// but left out of the request counts (`/v1/stats`' rates, the admitted metrics), which tell
    /// the gateway what clients offer.
    pub async fn predict_synthetic(&self, queries: Queries) -> Result<PerQuery<Prediction>, CoreError> {
        self.predict_as(queries, Detail::default(), Traffic::Synthetic).await
    }

    async fn predict_as(
        &self,
        queries: Queries,
        detail: Detail,
        traffic: Traffic,
    ) -> Result<PerQuery<Prediction>, CoreError> {
        if self.is_draining() {
            return Err(CoreError::Draining);
        }
        self.validate(&queries)?;
        let n = queries.len();
        let timeout = self.limits.request_timeout;
        // The deadline `tokio::time::timeout` would set (30 years on for a timeout past the
        // clock's range), from the admission's clock reading.
        let deadline_of = |at: Instant| at.checked_add(timeout).unwrap_or_else(|| at + FAR_FUTURE);
        let logits = if self.tokenizes_inline(&queries) {
            let encodings = queries.iter().map(|q| encode(&self.encoder, q)).collect::<Result<PerQuery<_>, _>>();
            let encodings = encodings.map_err(untokenizable)?;
            let tokens = encodings.iter().map(|e| e.len() as u64).sum();
            let Ok((_ticket, class)) = self.admission.try_admit_tokenized(n, tokens) else {
                return Err(self.refuse(n as u64, traffic));
            };
            let admitted_at = Instant::now();
            // Queued at once: from then on the lane answers each query by its deadline, wherever
            // it waits, so the request needs no timer of its own.
            self.queue(encodings, tokens, class, admitted_at, deadline_of(admitted_at), traffic).await?
        } else {
            let bound = token_bound(&queries, self.limits.max_query_tokens);
            let Ok(mut ticket) = self.admission.try_admit(n, bound) else {
                return Err(self.refuse(n as u64, traffic));
            };
            let admitted_at = Instant::now();
            let deadline = deadline_of(admitted_at);
            // The blocking pool may keep a long request waiting before it tokenizes it. Boxed: this
            // rare path's state would otherwise enlarge every request's future.
            let work = Box::pin(self.tokenize_and_queue(queries, &mut ticket, admitted_at, deadline, traffic));
            tokio::time::timeout_at(deadline, work).await.map_err(|_| CoreError::Timeout(timeout))??
        };
        if traffic == Traffic::Client {
            self.stats.completed(Instant::now(), n as u64);
        }
        Ok(logits.into_iter().map(|row| postprocess::prediction(&self.labels, row, detail)).collect())
    }

    /// Counts `n` queries refused for want of room, and says so.
    fn refuse(&self, n: u64, traffic: Traffic) -> CoreError {
        if traffic == Traffic::Client {
            self.stats.rejected(Instant::now(), n);
        }
        CoreError::Overloaded
    }

    fn validate(&self, queries: &[String]) -> Result<(), CoreError> {
        let limits = &self.limits;
        if queries.is_empty() {
            return Err(CoreError::Invalid("`queries` is empty".into()));
        }
        if queries.len() > limits.max_queries {
            return Err(CoreError::Invalid(format!(
                "{} queries in one request; the limit is {}",
                queries.len(),
                limits.max_queries
            )));
        }
        for (index, q) in queries.iter().enumerate() {
            if q.trim().is_empty() {
                return Err(CoreError::Invalid(format!("query {index} is empty")));
            }
            if q.len() > limits.max_query_bytes {
                return Err(CoreError::QueryTooLong { index, len: q.len(), limit: limits.max_query_bytes });
            }
        }
        Ok(())
    }

    /// A long request: tokenizes it on the blocking pool, charges its tokens, and queues it.
    async fn tokenize_and_queue(
        &self,
        queries: Queries,
        ticket: &mut admission::Ticket,
        admitted_at: Instant,
        deadline: Instant,
        traffic: Traffic,
    ) -> Result<PerQuery<Vec<f32>>, CoreError> {
        let n = queries.len() as u64;
        let encodings = self.tokenize(queries).await?;
        let charged = encodings.map(|encodings| {
            let tokens = encodings.iter().map(|e| e.len() as u64).sum();
            ticket.charge(tokens).map(|class| (encodings, tokens, class))
        });
        let Some(Ok((encodings, tokens, class))) = charged else {
            return Err(self.refuse(n, traffic));
        };
        self.queue(encodings, tokens, class, admitted_at, deadline, traffic).await
    }

    /// Queues every query of an admitted request in its class's lane, and waits for all logits.
    async fn queue(
        &self,
        encodings: PerQuery<Tokens>,
        tokens: u64,
        class: Class,
        admitted_at: Instant,
        deadline: Instant,
        traffic: Traffic,
    ) -> Result<PerQuery<Vec<f32>>, CoreError> {
        if traffic == Traffic::Client {
            self.stats.admitted(admitted_at, encodings.len() as u64);
            self.metrics.admitted(class, tokens);
        }
        let queue = &self.lanes[class as usize];
        // The request's span, when it was made up front (for the backend thread's trace line).
        let span = tracing::Span::current();
        let enqueue = |tokens: Tokens| {
            let (respond, rx) = oneshot::channel();
            let entry = Entry { tokens, admitted_at, deadline, respond, span: span.clone() };
            // The queue holds as many entries as there are admission permits, so this never waits.
            queue.try_send(entry).map_err(|e| CoreError::Internal(format!("queue: {e}")))?;
            Ok::<_, CoreError>(rx)
        };
        let dropped = |_| CoreError::Internal("the backend dropped a query".into());
        let timeout = self.limits.request_timeout;
        let failed = |e| match e {
            Unanswered::Failed(e) => CoreError::Internal(e.to_string()),
            Unanswered::TimedOut => CoreError::Timeout(timeout),
        };
        if encodings.len() == 1 {
            // Most requests: one query, no join.
            let tokens = encodings.into_iter().next().expect("one encoding");
            return Ok(smallvec![enqueue(tokens)?.await.map_err(dropped)?.map_err(failed)?]);
        }
        let receivers = encodings.into_iter().map(enqueue).collect::<Result<Vec<_>, _>>()?;
        let answers = try_join_all(receivers).await.map_err(dropped)?;
        answers.into_iter().map(|a| a.map_err(failed)).collect()
    }

    /// Whether `queries` are tokenized on the runtime thread, before admission: a short request
    /// tokenizes in less CPU than a thread hand-off costs.
    fn tokenizes_inline(&self, queries: &[String]) -> bool {
        let inline = if self.encoder.is_fast() { INLINE_TOKENIZE_BYTES_FAST } else { INLINE_TOKENIZE_BYTES };
        queries.iter().map(String::len).sum::<usize>() <= inline
    }

    /// A request too long to tokenize inline ([`tokenizes_inline`](Self::tokenizes_inline)), on the
    /// blocking pool, in parallel across requests, so it never stalls the runtime; its running
    /// token total is checked after each query, and tokenizing stops as soon as the request could
    /// no longer be admitted (`None`).
    async fn tokenize(&self, queries: Queries) -> Result<Option<PerQuery<Tokens>>, CoreError> {
        let (encoder, admission) = (self.encoder.clone(), self.admission.clone());
        let encode = move || {
            let n = queries.len() as u64;
            let (mut encodings, mut tokens) = (PerQuery::with_capacity(queries.len()), 0);
            for q in &queries {
                let enc = encode(&encoder, q)?;
                tokens += enc.len() as u64;
                encodings.push(enc);
                if !admission.fits(n, tokens) {
                    return Ok(None);
                }
            }
            Ok(Some(encodings))
        };
        tokio::task::spawn_blocking(encode)
            .await
            .map_err(|e| CoreError::Internal(format!("tokenizer task: {e}")))?
            .map_err(untokenizable)
    }
}

fn untokenizable(e: tokenizers::Error) -> CoreError {
    CoreError::Invalid(format!("could not tokenize: {e}"))
}

/// `q`'s tokens, through this thread's reused buffers: one allocation, the [`Tokens`] themselves.
fn encode(encoder: &Encoder, q: &str) -> Result<Tokens, tokenizers::Error> {
    thread_local! {
        static SCRATCH: RefCell<(Vec<i64>, Vec<i64>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    }
    SCRATCH.with_borrow_mut(|(ids, type_ids)| {
        encoder.encode_into(q, ids, type_ids)?;
        Ok(Tokens::new(ids, type_ids))
    })
}

/// Most tokens `queries` can make: each query is cut to `max_query_tokens`, and each token takes
/// at least one visible character, besides the two special tokens (`[CLS]`, `[SEP]`) per query.
fn token_bound(queries: &[String], max_query_tokens: usize) -> u64 {
    let visible = |q: &String| {
        if q.is_ascii() {
            // The ASCII characters `char::is_whitespace` counts (`u8::is_ascii_whitespace` leaves
            // out the vertical tab), a byte at a time.
            q.bytes().filter(|b| !matches!(b, b'\t'..=b'\r' | b' ')).count()
        } else {
            q.chars().filter(|c| !c.is_whitespace()).count()
        }
    };
    let per_query = |q: &String| (visible(q) + 2).min(max_query_tokens);
    queries.iter().map(per_query).sum::<usize>() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_bound_is_never_below_the_tokenizers_count() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/snips-minilm-l6");
        let model = crate::model::ModelDir::load(&dir, None).unwrap();
        let long = "supercalifragilistic antidisestablishmentarianism ".repeat(40);
        for q in [
            "Music",
            "play some jazz music",
            "what's the weather like in paris tomorrow?!",
            "ÉTÉ à Zürich, 北京",
            &long,
        ] {
            let real = model.encoder.encode(q).unwrap().0.len() as u64;
            let bound = token_bound(&[q.to_owned()], model.max_tokens);
            assert!(bound >= real, "{q:?}: bound {bound} < {real} tokens");
        }
        assert_eq!(token_bound(&[long.clone(), long], 128), 256, "each query is cut to the truncation");
        assert_eq!(token_bound(&["a b".into()], 128), 4);
        for q in ["a\tb\nc\x0bd\x0ce\rf g", " \u{85}x\u{a0}y ", "\x00\x1f\x7f~"] {
            let chars = q.chars().filter(|c| !c.is_whitespace()).count() as u64 + 2;
            assert_eq!(token_bound(&[q.to_owned()], 128), chars, "{q:?}");
        }
    }
}
