//! The process's stop signals, for the binaries that serve through this crate.

use std::future::Future;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Resolves to `"SIGTERM"` or `"SIGINT"` at the first of them. The handlers are installed when
/// this is called, not when the future is first polled: called before a port is announced, a
/// signal sent as soon as the process listens starts its drain instead of killing it. A signal
/// that cannot be listened for is logged and never resolves this. Must be called within a tokio
/// runtime.
pub fn stop_signal() -> impl Future<Output = &'static str> {
    let listen = |kind: SignalKind, name: &str| {
        signal(kind)
            .inspect_err(|e| tracing::error!(error = %e, "cannot listen for {name}; it will not stop the process"))
            .ok()
    };
    let received = |s: Option<Signal>| async move {
        match s {
            Some(mut s) => drop(s.recv().await),
            None => std::future::pending().await,
        }
    };
    let (term, int) = (listen(SignalKind::terminate(), "SIGTERM"), listen(SignalKind::interrupt(), "SIGINT"));
    async move {
        tokio::select! {
            () = received(term) => "SIGTERM",
            () = received(int) => "SIGINT",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_signal_sent_before_the_first_poll_is_not_lost() {
        let stop = stop_signal();
        // Before the future's first poll: with the handler installed only then, this would kill
        // the test process.
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), stop).await;
        assert_eq!(got, Ok("SIGTERM"));
    }
}
