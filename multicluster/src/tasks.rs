//! Background tasks that live exactly as long as their owner: a controller's watches and
//! forwarders are aborted when its run loop returns or is dropped.

use tokio::task::JoinHandle;

/// Aborts every task it holds when dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use flotilla_multicluster::tasks::AbortOnDrop;
///
/// let watch = tokio::spawn(std::future::pending::<()>());
/// let guard = AbortOnDrop::from([watch]);
/// drop(guard); // the watch task is aborted
/// # }
/// ```
#[derive(Debug, Default)]
pub struct AbortOnDrop(Vec<JoinHandle<()>>);

impl AbortOnDrop {
    /// Holds one more task.
    pub fn push(&mut self, task: JoinHandle<()>) {
        self.0.push(task);
    }
}

impl From<Vec<JoinHandle<()>>> for AbortOnDrop {
    fn from(tasks: Vec<JoinHandle<()>>) -> Self {
        AbortOnDrop(tasks)
    }
}

impl<const N: usize> From<[JoinHandle<()>; N]> for AbortOnDrop {
    fn from(tasks: [JoinHandle<()>; N]) -> Self {
        AbortOnDrop(tasks.into())
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropping_the_guard_aborts_every_task() {
        let tasks: Vec<_> = (0..3)
            .map(|_| tokio::spawn(std::future::pending::<()>()))
            .collect();
        let handles: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        drop(AbortOnDrop::from(tasks));
        tokio::task::yield_now().await;
        assert!(handles.iter().all(|h| h.is_finished()));
    }
}
