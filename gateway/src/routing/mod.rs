//! Routing a client request ([`request`]) to a worker: the balancer ([`balance`]: power of two
//! choices over a load estimate), the forward with its attempts ([`proxy`]), the retry budget
//! ([`retry`]) and the merging of single-query requests bound for one worker into one exchange
//! ([`coalesce`]). Layers, lowest first: `request`; `attempt` (one attempt sent alone, and its
//! end for the request); `coalesce`, which sends an attempt in a merge or alone; `proxy`, which
//! picks the worker, attempts and retries.
//! What an attempt's outcome means (answer, retry, timeout, and its effect on the worker's
//! health) is decided in `pool::outcome`, which the worker monitor shares.

mod attempt;
mod balance;
mod coalesce;
mod proxy;
mod request;
mod retry;

pub(crate) use proxy::forward;
pub(crate) use request::{ClientRequest, Cost, OipSingle, Single};
