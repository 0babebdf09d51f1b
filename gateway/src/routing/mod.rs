//! Routing a client request to a worker: the balancer ([`balance`]: power of two choices over a
//! load estimate), the forward with its attempts ([`proxy`]) and the retry budget ([`retry`]).
//! What an attempt's outcome means (answer, retry, timeout, and its effect on the worker's
//! health) is decided in `pool::outcome`, which the worker monitor shares.

mod balance;
mod proxy;
mod retry;

pub(crate) use proxy::{Cost, Incoming, forward};
