//! Background tasks that live as long as their owner.

use tokio::task::JoinHandle;

/// Aborts a background task when dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
