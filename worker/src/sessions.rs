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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, mpsc as std_mpsc};
    use std::time::Duration;

    use super::*;
    use crate::backend::InputBatch;

    type Gate = std_mpsc::Sender<Result<(), BackendError>>;

    /// A backend whose warm-up waits until the test says how it ends.
    struct Gated(std_mpsc::Receiver<Result<(), BackendError>>);

    impl Backend for Gated {
        fn infer(&mut self, _: &InputBatch) -> Result<Vec<Vec<f32>>, BackendError> {
            Ok(Vec::new())
        }
        fn warm_up(&mut self) -> Result<(), BackendError> {
            self.0.recv().unwrap_or(Ok(()))
        }
    }

    /// Two light sessions and a heavy one, each made on a thread of its own as `Core::start`
    /// does; their reports, and the gates ending the light sessions' warm-ups and the heavy one's.
    fn sessions() -> (Reports, [Gate; 2], Gate) {
        let (light, light_warmups): (Vec<_>, Vec<_>) = (0..2).map(|_| std_mpsc::channel()).unzip();
        let (heavy, heavy_warmup) = std_mpsc::channel();
        let warmups = Mutex::new((light_warmups, Some(heavy_warmup)));
        let (setup, reports) = reporting(3, move |class| {
            let mut w = warmups.lock().unwrap();
            Ok(Gated(if class == Class::Heavy { w.1.take().unwrap() } else { w.0.pop().unwrap() }))
        });
        let setup = Arc::new(setup);
        for class in [Class::Light, Class::Light, Class::Heavy] {
            let setup = setup.clone();
            std::thread::spawn(move || drop(setup(class)));
        }
        (reports, light.try_into().unwrap(), heavy)
    }

    #[tokio::test]
    async fn the_worker_serves_once_one_session_of_each_lane_is_warm_and_the_rest_join() {
        let (reports, light, heavy) = sessions();
        let serving = tokio::spawn(wait_serving(reports));
        // Both light sessions are warm, the heavy lane's is not: not yet.
        light.iter().for_each(|g| g.send(Ok(())).unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!serving.is_finished(), "no heavy session is warm yet");
        heavy.send(Ok(())).unwrap();
        let mut up = serving.await.unwrap().expect("serving");
        assert_eq!(all_up(&mut up).await, Ok(()));
    }

    #[tokio::test]
    async fn a_session_still_warming_joins_later_and_its_failure_is_reported() {
        let (reports, light, heavy) = sessions();
        light[0].send(Ok(())).unwrap();
        heavy.send(Ok(())).unwrap();
        let mut up = wait_serving(reports).await.expect("serving with one light session");
        assert_eq!(*up.borrow(), Up::Coming);
        light[1].send(Err(BackendError::Inference("capture failed".into()))).unwrap();
        let failed = all_up(&mut up).await.unwrap_err();
        assert!(failed.contains("capture failed"), "{failed}");
    }

    #[tokio::test]
    async fn a_session_failing_before_the_worker_serves_is_the_start_up_error() {
        let (reports, light, _heavy) = sessions();
        light[0].send(Err(BackendError::Load("no model".into()))).unwrap();
        let e = wait_serving(reports).await.unwrap_err();
        assert!(e.to_string().contains("no model"), "{e}");
    }
}
