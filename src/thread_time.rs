//! How long a request keeps the broker's threads busy, which its client's
//! `request_percentage` quota is measured in (Kafka's `requestThreadTimeNanos`): the time
//! spent polling its handler, plus the time its storage work took on the blocking pool.
//! Time a handler spends waiting (a long-polling fetch, acks=all, a rebalance) is not
//! counted, as Kafka does not count a request's time in purgatory.
//!
//! [`metered`] runs a request and says how long; inside it, [`blocking`] runs storage work
//! on the blocking pool and charges it to the request.

use std::cell::Cell;
use std::future::Future;
use std::time::{Duration, Instant};

tokio::task_local! {
    /// The current request's thread time so far, in ns.
    static SPENT: Cell<u64>;
}

fn charge(d: Duration) {
    let _ = SPENT.try_with(|s| s.set(s.get().saturating_add(d.as_nanos() as u64)));
}

/// Runs `fut` and says how much thread time it took.
pub async fn metered<F: Future>(fut: F) -> (F::Output, Duration) {
    SPENT
        .scope(Cell::new(0), async {
            let mut fut = std::pin::pin!(fut);
            let out = std::future::poll_fn(|cx| {
                let started = Instant::now();
                let out = fut.as_mut().poll(cx);
                charge(started.elapsed());
                out
            })
            .await;
            (out, Duration::from_nanos(SPENT.with(Cell::get)))
        })
        .await
}

/// Runs `f` on tokio's blocking pool, charging its time to the request being
/// [`metered`], if any. `Err` if the task panicked.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let (out, took) = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let out = f();
        (out, started.elapsed())
    })
    .await?;
    charge(took);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    /// Polls and blocking work count, waits do not.
    #[tokio::test]
    async fn counts_polls_and_blocking_work_not_waits() {
        let (v, spent) = metered(async {
            busy(Duration::from_millis(20));
            tokio::time::sleep(Duration::from_secs(2)).await;
            blocking(|| busy(Duration::from_millis(30))).await.unwrap();
            7
        })
        .await;
        assert_eq!(v, 7);
        assert!(spent >= Duration::from_millis(50), "{spent:?}");
        // The 2 s wait is not in it: what was counted is 50 ms of work and the polls' own
        // overhead (a bound with the whole wait as its margin, not a timing).
        assert!(spent < Duration::from_secs(2), "{spent:?}");
    }

    /// Outside a metered request, blocking work still runs and charges nothing.
    #[tokio::test]
    async fn blocking_outside_a_request_just_runs() {
        assert_eq!(blocking(|| 3).await.unwrap(), 3);
    }
}
