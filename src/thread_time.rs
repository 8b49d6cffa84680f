//! How long a request keeps the broker's threads busy, which its client's
//! `request_percentage` quota is measured in (Kafka's `requestThreadTimeNanos`): the time
//! spent polling its handler, plus the time its storage work took on the blocking pool.
//! Time a handler spends waiting (a long-polling fetch, acks=all, a rebalance) is not
//! counted, as Kafka does not count a request's time in purgatory.
//!
//! [`metered`] runs a request and [`so_far`] says how long it has taken; inside it,
//! [`blocking`] runs storage work on the blocking pool and charges it to the request.

use std::cell::Cell;
use std::future::Future;
use std::time::{Duration, Instant};

/// A request's thread time: what its finished polls and blocking work took, and when its
/// current poll began.
#[derive(Clone, Copy, Default)]
struct Meter {
    spent: Duration,
    polling_since: Option<Instant>,
}

tokio::task_local! {
    static METER: Cell<Meter>;
}

fn update(f: impl FnOnce(&mut Meter)) {
    let _ = METER.try_with(|m| {
        let mut v = m.get();
        f(&mut v);
        m.set(v);
    });
}

/// Runs `fut` as one request, whose thread time [`so_far`] tells inside it.
pub async fn metered<F: Future>(fut: F) -> F::Output {
    METER
        .scope(Cell::new(Meter::default()), async {
            let mut fut = std::pin::pin!(fut);
            std::future::poll_fn(|cx| {
                let started = Instant::now();
                update(|m| m.polling_since = Some(started));
                let out = fut.as_mut().poll(cx);
                update(|m| {
                    m.spent += started.elapsed();
                    m.polling_since = None;
                });
                out
            })
            .await
        })
        .await
}

/// The thread time of the request being [`metered`] so far, its current poll included;
/// zero outside one.
pub fn so_far() -> Duration {
    METER
        .try_with(|m| {
            let m = m.get();
            m.spent + m.polling_since.map_or(Duration::ZERO, |t| t.elapsed())
        })
        .unwrap_or_default()
}

/// Charges `took` (work done for it elsewhere, such as its share of a group's storage
/// write) to the request being [`metered`], if any.
pub fn charge(took: Duration) {
    update(|m| m.spent += took);
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
    update(|m| m.spent += took);
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
        let spent = metered(async {
            busy(Duration::from_millis(20));
            tokio::time::sleep(Duration::from_secs(2)).await;
            blocking(|| busy(Duration::from_millis(30))).await.unwrap();
            so_far()
        })
        .await;
        assert!(spent >= Duration::from_millis(50), "{spent:?}");
        // The 2 s wait is not in it: what was counted is 50 ms of work and the polls' own
        // overhead (a bound with the whole wait as its margin, not a timing).
        assert!(spent < Duration::from_secs(2), "{spent:?}");
    }

    /// A request that finishes in its first poll (most do) sees that poll's time so far.
    #[tokio::test]
    async fn the_current_poll_counts() {
        let spent = metered(async {
            busy(Duration::from_millis(10));
            so_far()
        })
        .await;
        assert!(spent >= Duration::from_millis(10), "{spent:?}");
    }

    /// Outside a metered request, blocking work still runs and charges nothing.
    #[tokio::test]
    async fn blocking_outside_a_request_just_runs() {
        assert_eq!(blocking(|| 3).await.unwrap(), 3);
        assert_eq!(so_far(), Duration::ZERO);
    }
}
