//! Routing a client request to a worker: the balancer ([`balance`]: power of two choices over a
//! load estimate), the forward with its attempts ([`proxy`]), the retry budget ([`retry`]) and
//! the merging of single-query requests bound for one worker into one exchange ([`coalesce`]).
//! What an attempt's outcome means (answer, retry, timeout, and its effect on the worker's
//! health) is decided in `pool::outcome`, which the worker monitor shares.

mod balance;
mod coalesce;
mod proxy;
mod retry;

pub(crate) use coalesce::{OipSingle, Single, policy as coalesce_policy};
pub(crate) use proxy::{ClientRequest, Cost, forward};
