//! A panic while a request is handled (a bug): the client gets a JSON 500 `internal` (a gRPC
//! call: INTERNAL, `grpc::server`), never a dropped connection; it is counted in
//! `gateway_panics_total{kind}`, where the kind is the panic's source location; and it is
//! logged once per kind (location and message, with a backtrace when `RUST_BACKTRACE` asks for
//! one), not once per request: a bug hit by every request under load once wrote ~160 lines per
//! request (89 MB of log in 20 s).
//!
//! How: [`Guarded`] polls the handler's future inside `catch_unwind`, with a thread-local flag
//! set. The process's panic hook (wrapped once, [`install_hook`]) sees the flag, keeps the
//! location for the guard and prints nothing; panics anywhere else go to the previous hook as
//! before.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Once};
use std::task::{Context, Poll};

use axum::response::Response;
use listener::shard::Counter;
use pin_project_lite::pin_project;
use prometheus_client::metrics::family::Family;

use crate::error::RequestError;
use crate::metrics::PanicLabels;

thread_local! {
    /// A guarded handler is being polled on this thread.
    static IN_REQUEST: Cell<bool> = const { Cell::new(false) };
    /// Where the last guarded panic on this thread happened (set by the hook).
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Wrap the process's panic hook (once): panics in guarded handlers are the guard's to report.
pub(crate) fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_REQUEST.with(Cell::get) {
                let location =
                    info.location().map_or_else(|| "unknown".to_owned(), |l| format!("{}:{}", l.file(), l.line()));
                LOCATION.with(|l| *l.borrow_mut() = Some(location));
                return;
            }
            previous(info);
        }));
    });
}

/// What the guard reports panics with: the counter family and the kinds already logged.
#[derive(Debug, Clone)]
pub(crate) struct Panics {
    counter: Family<PanicLabels, Counter>,
    logged: std::sync::Arc<Mutex<HashSet<String>>>,
}

impl Panics {
    pub(crate) fn new(counter: Family<PanicLabels, Counter>) -> Self {
        install_hook();
        Self { counter, logged: std::sync::Arc::default() }
    }

    /// Count and (once per kind) log a caught panic.
    fn record(&self, payload: &(dyn Any + Send)) {
        let kind = LOCATION.with(|l| l.borrow_mut().take()).unwrap_or_else(|| "unknown".to_owned());
        self.counter.get_or_create(&PanicLabels { kind: kind.clone() }).inc();
        let first = self.logged.lock().map(|mut seen| seen.insert(kind.clone())).unwrap_or(false);
        if first {
            let backtrace = std::backtrace::Backtrace::capture();
            tracing::error!(kind, message = %message(payload), %backtrace,
                "a request handler panicked (answered as an internal error; logged once per kind, counted in gateway_panics_total)");
        }
    }
}

/// What a guarded handler answers when it panicked.
pub(crate) trait PanicAnswer {
    fn panicked() -> Self;
}

/// The JSON 500 `internal`, no detail for the client.
impl PanicAnswer for Response {
    fn panicked() -> Self {
        RequestError::Internal(String::new()).quiet_response()
    }
}

/// The message of a panic payload (`panic!("...")` gives a `&str` or a `String`).
fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

pin_project! {
    /// A handler's future whose panic becomes its [`PanicAnswer`] (a JSON 500). `panics` is
    /// the server's own reference (each core's, in the per-core runtime): one count a request
    /// on a line no other core writes, not the two shared ones of a `Panics` clone.
    pub(crate) struct Guarded<F> {
        #[pin]
        inner: F,
        panics: Arc<Panics>,
    }
}

impl<F> Guarded<F> {
    pub(crate) fn new(inner: F, panics: Arc<Panics>) -> Self {
        Self { inner, panics }
    }
}

impl<F> Future for Guarded<F>
where
    F: Future,
    F::Output: PanicAnswer,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let inner = this.inner;
        let was = IN_REQUEST.with(|f| f.replace(true));
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx)));
        IN_REQUEST.with(|f| f.set(was));
        match polled {
            Ok(polled) => polled,
            // The future is not polled again: hyper drops it with the answer.
            Err(payload) => {
                this.panics.record(payload.as_ref());
                Poll::Ready(F::Output::panicked())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;
    use http::StatusCode;
    use http_body_util::BodyExt;

    /// A `MakeWriter` into a shared buffer.
    #[derive(Clone, Default)]
    struct Log(std::sync::Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Log {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    async fn handler(n: u32) -> Response {
        tokio::task::yield_now().await;
        if n > 0 {
            let v: Vec<u32> = Vec::new();
            // An index out of bounds: a bug of the kind the issue found.
            return (StatusCode::OK, v[n as usize].to_string()).into_response();
        }
        if n == 0 {
            panic!("second kind");
        }
        StatusCode::OK.into_response()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panic_is_a_json_500_counted_every_time_and_logged_once_per_kind() {
        let log = Log::default();
        let sink = log.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || sink.clone()).with_ansi(false).finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let metrics = crate::metrics::Metrics::default();
        let panics = Arc::new(Panics::new(metrics.panics.clone()));
        for n in [1, 2, 3, 0, 0, 1] {
            let resp = Guarded::new(handler(n), Arc::clone(&panics)).await;
            assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            let e: wire::ErrorBody = serde_json::from_slice(&body).unwrap();
            assert_eq!(e.error_type, wire::ErrorType::Internal);
            assert_eq!(e.error, "internal error", "no detail for the client");
        }
        let text = crate::metrics::render(&metrics.registry());
        let series: Vec<&str> = text.lines().filter(|l| l.starts_with("gateway_panics_total{")).collect();
        assert_eq!(series.len(), 2, "two kinds: {text}");
        let mut counts: Vec<&str> = series.iter().map(|l| l.rsplit(' ').next().unwrap()).collect();
        counts.sort_unstable();
        assert_eq!(counts, ["2", "4"], "{series:?}");
        assert!(series.iter().all(|l| l.contains("panics.rs:")), "the kind is the location: {series:?}");
        let out = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert_eq!(out.matches("a request handler panicked").count(), 2, "once per kind: {out}");
        assert!(out.contains("index out of bounds") && out.contains("second kind"), "{out}");
        assert!(!out.contains("request failed"), "no line per request: {out}");
    }
}
