//! Admission: whether the gateway takes a client's request at all. The one entry point is
//! [`Admission::admit`], called by the predict entry (`predict::handle`) for every predict route
//! before anything else is done for the request.
//!
//! Policy today: at most `--max-outstanding` requests inside the gateway at once (a semaphore's
//! `try_acquire`: never a queue); beyond it 429 `overloaded` with `Retry-After`, at once, counted
//! in `gateway_admission_rejected_total` and `gateway_requests_total{outcome="overloaded"}`.
//! What a request costs is one permit, whatever its size; a cost in tokens (or a bound on the
//! wait for the body) would be decided here.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::error::RequestError;
use crate::metrics::{Metrics, RequestLabels};

/// The admission bound of the gateway.
pub(crate) struct Admission {
    permits: Semaphore,
    retry_after_s: u64,
    outstanding: Gauge,
    rejected: Counter,
    requests: Family<RequestLabels, Counter>,
    rejected_labels: RequestLabels,
}

/// An admitted request: holds its permit and counts in `gateway_outstanding` while it lives,
/// also when the client goes away.
#[derive(Debug)]
pub(crate) struct Admitted<'a> {
    _permit: SemaphorePermit<'a>,
    outstanding: &'a Gauge,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.outstanding.dec();
    }
}

impl Admission {
    pub(crate) fn new(max_outstanding: usize, retry_after_s: u64, metrics: &Metrics) -> Self {
        let rejected_labels = RequestLabels {
            pool: String::new(),
            worker: "none".to_owned(),
            outcome: wire::ErrorType::Overloaded.as_str().to_owned(),
        };
        Self {
            permits: Semaphore::new(max_outstanding),
            retry_after_s,
            outstanding: metrics.outstanding.clone(),
            rejected: metrics.admission_rejected.clone(),
            requests: metrics.requests.clone(),
            rejected_labels,
        }
    }

    /// Admit a request, or refuse it at once with 429 `overloaded`.
    pub(crate) fn admit(&self) -> Result<Admitted<'_>, RequestError> {
        match self.permits.try_acquire() {
            Ok(permit) => {
                self.outstanding.inc();
                Ok(Admitted { _permit: permit, outstanding: &self.outstanding })
            }
            Err(_) => {
                self.rejected.inc();
                self.requests.get_or_create(&self.rejected_labels).inc();
                Err(RequestError::Overloaded { retry_after_s: self.retry_after_s })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_refuses_at_once_and_frees_on_drop() {
        let m = Metrics::default();
        let a = Admission::new(2, 3, &m);
        let one = a.admit().unwrap();
        let two = a.admit().unwrap();
        assert_eq!(m.outstanding.get(), 2);
        let refused = a.admit().unwrap_err();
        assert!(matches!(refused, RequestError::Overloaded { retry_after_s: 3 }), "{refused}");
        assert_eq!(m.admission_rejected.get(), 1);
        drop(one);
        assert_eq!(m.outstanding.get(), 1);
        let _three = a.admit().unwrap();
        drop(two);
    }
}
