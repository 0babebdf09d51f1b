//! The backend sessions coming up. Each is made (its model loaded) and then warmed up
//! ([`Backend::warm_up`]) on its own thread, and takes batches once warm. The worker serves once
//! every session is loaded and one session of each lane is warm, so every request can be
//! answered at once; the others join their lane as they finish, and the calibration waits for
//! all of them (it measures every session). A session that fails to come up, before or after
//! that, is a start-up error: the worker stops rather than serve with a lane short.

use tokio::sync::{mpsc, watch};

use crate::backend::{Backend, BackendError};
use crate::class::Class;

/// What a session's thread reports.
#[derive(Debug)]
enum Event {
    Loaded,
    Warm(Class),
    Failed(BackendError),
}

/// Where the sessions are, as a whole.
#[derive(Debug, Clone, PartialEq)]
pub enum Up {
    /// Some are still loading or warming up.
    Coming,
    /// Every session takes batches.
    All,
    /// One could not come up: why.
    Failed(String),
}

/// Reports of the sessions' threads, to [`wait_serving`].
#[derive(Debug)]
pub struct Reports {
    rx: mpsc::Receiver<Event>,
    sessions: usize,
}

/// Makes each session's backend through `make`, then warms it up, saying so at each step: the
/// closure `Core::start` runs on each session's thread, and the reports it sends, for `sessions`
/// sessions in all.
pub fn reporting<B, F>(sessions: usize, make: F) -> (impl Fn(Class) -> Option<B> + Send + Sync + 'static, Reports)
where
    B: Backend,
    F: Fn(Class) -> Result<B, BackendError> + Send + Sync + 'static,
{
    let (tx, rx) = mpsc::channel(2 * sessions.max(1));
    let setup = move |class| {
        let report = |e| drop(tx.blocking_send(e));
        let warm = make(class).and_then(|mut backend| {
            report(Event::Loaded);
            backend.warm_up().map(|()| backend)
        });
        match warm {
            Ok(backend) => {
                report(Event::Warm(class));
                Some(backend)
            }
            Err(e) => {
                report(Event::Failed(e));
                None
            }
        }
    };
    (setup, Reports { rx, sessions })
}

/// Waits until the worker may serve: every session loaded and one of each lane warm (the first
/// failure is returned instead). The rest is followed by a task; the watch it returns says when
/// every session is up, or which failed.
pub async fn wait_serving(mut reports: Reports) -> Result<watch::Receiver<Up>, BackendError> {
    let gone = || BackendError::Load("a backend thread ended while loading".into());
    let (mut loaded, mut warm) = (0, [0usize; 2]);
    while loaded < reports.sessions || warm.contains(&0) {
        match reports.rx.recv().await.ok_or_else(gone)? {
            Event::Loaded => loaded += 1,
            Event::Warm(class) => warm[class.index()] += 1,
            Event::Failed(e) => return Err(e),
        }
    }
    let left = reports.sessions - warm.iter().sum::<usize>();
    let (tx, rx) = watch::channel(if left == 0 { Up::All } else { Up::Coming });
    if left > 0 {
        tokio::spawn(async move {
            for _ in 0..left {
                let up = match reports.rx.recv().await {
                    Some(Event::Warm(_)) => continue,
                    Some(Event::Failed(e)) => Up::Failed(e.to_string()),
                    Some(Event::Loaded) => Up::Failed("a session loaded twice".into()),
                    None => Up::Failed(gone().to_string()),
                };
                tracing::error!(reason = ?up, "a backend session did not come up; stopping");
                let _ = tx.send(up);
                return;
            }
            tracing::info!("every backend session is up");
            let _ = tx.send(Up::All);
        });
    }
    Ok(rx)
}

/// Resolves once every session is up (`Ok`) or one failed (`Err`, why).
pub async fn all_up(up: &mut watch::Receiver<Up>) -> Result<(), String> {
    let seen = up.wait_for(|u| *u != Up::Coming).await.map(|u| u.clone());
    match seen {
        Ok(Up::Failed(why)) => Err(why),
        Ok(_) => Ok(()),
        Err(_) => Err("the sessions' watch closed".into()),
    }
}
