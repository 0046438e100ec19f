//! How the connector starts and joins its tasks and threads, so that none ends unseen: a
//! panic is counted as it unwinds out of the task or thread (then goes on unwinding, so
//! the `JoinError` or `thread::Result` holds it as before), and a task found cancelled at
//! its join is counted there. Both in [`TaskStats`](crate::TaskStats).
//!
//! Every task and thread of the connector starts through [`Tasks`], so a panic a join
//! meets has been counted already and the join does not count it again.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;

use tokio::task::{JoinError, JoinHandle};

use crate::stats::{TaskCounters, TaskStats};

/// Starts and joins the connector's tasks and threads, counting their failures.
#[derive(Clone, Debug)]
pub(crate) struct Tasks(Arc<TaskCounters>);

impl Tasks {
    pub(crate) fn new() -> Self {
        Self(Arc::new(TaskCounters::new()))
    }

    pub(crate) fn stats(&self) -> TaskStats {
        self.0.snapshot()
    }

    /// Counts a panic caught in a task or thread, then resumes its unwinding.
    fn panicked(&self, payload: Box<dyn Any + Send>) -> ! {
        self.0.panics.add(1);
        resume_unwind(payload)
    }

    /// Runs `f`, counting a panic out of it.
    fn guard<R>(&self, f: impl FnOnce() -> R) -> R {
        catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| self.panicked(p))
    }

    /// `tokio::spawn`, counting a panic of the task.
    ///
    /// # Panics
    /// Outside a tokio runtime (tokio's own panic).
    pub(crate) fn spawn<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        tokio::spawn(Counted {
            fut: Box::pin(fut),
            tasks: self.clone(),
        })
    }

    /// `tokio::task::spawn_blocking`, counting a panic of `f`.
    ///
    /// # Panics
    /// Outside a tokio runtime (tokio's own panic).
    pub(crate) fn spawn_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> JoinHandle<R> {
        let tasks = self.clone();
        tokio::task::spawn_blocking(move || tasks.guard(f))
    }

    /// Starts an OS thread named `name`, counting a panic of `f`.
    ///
    /// # Errors
    /// The OS refused the thread.
    pub(crate) fn thread(
        &self,
        name: String,
        f: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let tasks = self.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || tasks.guard(f))
    }

    /// Waits for a task started by [`spawn`](Self::spawn) or
    /// [`spawn_blocking`](Self::spawn_blocking); its output, `None` when it panicked
    /// (counted already, as it unwound) or was cancelled (counted now: the connector never
    /// cancels a task it joins).
    pub(crate) async fn join<T>(&self, handle: JoinHandle<T>) -> Option<T> {
        handle.await.map_err(|e| self.failed(&e)).ok()
    }

    /// Counts a join's error that is a cancellation.
    fn failed(&self, e: &JoinError) {
        if e.is_cancelled() {
            self.0.cancellations.add(1);
        }
    }
}

/// A future whose panic is counted (then resumed, for tokio to catch as before).
struct Counted<F> {
    fut: Pin<Box<F>>,
    tasks: Tasks,
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // `Counted` is `Unpin`: its future is boxed.
        let this = self.get_mut();
        let fut = &mut this.fut;
        this.tasks.guard(|| fut.as_mut().poll(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(panics: u64, cancellations: u64) -> TaskStats {
        TaskStats {
            task_panics: panics,
            task_cancellations: cancellations,
        }
    }

    #[tokio::test]
    async fn a_task_panic_is_counted_once_and_still_reaches_the_join() {
        let tasks = Tasks::new();
        let ok = tasks.spawn(async {
            tokio::task::yield_now().await;
            7
        });
        let bad = tasks.spawn(async {
            tokio::task::yield_now().await;
            panic!("test: a task panics");
        });
        assert_eq!(tasks.join(ok).await, Some(7));
        let e = bad.await.expect_err("the task panicked");
        assert!(e.is_panic());
        assert_eq!(
            e.into_panic().downcast_ref::<&str>(),
            Some(&"test: a task panics")
        );
        assert_eq!(tasks.stats(), stats(1, 0));
    }

    #[tokio::test]
    async fn a_joined_panic_is_not_counted_twice() {
        let tasks = Tasks::new();
        let bad = tasks.spawn_blocking(|| panic!("test: a blocking job panics"));
        assert_eq!(tasks.join(bad).await, None);
        assert_eq!(tasks.stats(), stats(1, 0));
    }

    #[test]
    fn a_thread_panic_is_counted_and_still_reaches_the_join() {
        let tasks = Tasks::new();
        let t = tasks
            .thread("kvroute-test".to_owned(), || {
                panic!("test: a thread panics")
            })
            .unwrap();
        assert!(t.join().is_err());
        assert_eq!(tasks.stats(), stats(1, 0));
    }

    #[tokio::test]
    async fn an_abort_found_at_a_join_is_a_cancellation() {
        let tasks = Tasks::new();
        let t = tasks.spawn(core::future::pending::<()>());
        t.abort();
        assert_eq!(tasks.join(t).await, None);
        assert_eq!(tasks.stats(), stats(0, 1));
    }
}
