//! A small cache of broker connections, one per broker address, credentials and TLS setting
//! (each publisher's key says which): made lazily by
//! the first attempt that needs it (the attempts behind it wait for that one connect, each to
//! its own deadline), made again after a failure, and bounded in number (the least recently
//! used is dropped to make room). A slot per broker: one broker slow to connect never holds an
//! attempt bound for another.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use tokio::time::Instant;

use crate::delivery::{ErrorKind, Failure, Phases};

/// One broker's connection, made at most once at a time.
pub(super) struct Slot<C> {
    conn: tokio::sync::Mutex<Option<C>>,
}

impl<C: Clone> Slot<C> {
    /// The live connection, or a new one from `connect` (also when `alive` says the cached one
    /// is gone).
    pub(super) async fn get<E, F, Fut>(
        &self,
        alive: impl Fn(&C) -> bool,
        connect: F,
    ) -> Result<(C, bool), E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<C, E>>,
    {
        let mut held = self.conn.lock().await;
        if let Some(c) = held.as_ref().filter(|c| alive(c)) {
            return Ok((c.clone(), false));
        }
        *held = None;
        let c = connect().await?;
        *held = Some(c.clone());
        Ok((c, true))
    }

    /// [`Self::get`] within the connect deadline (`connect_timeout`, within what is left of
    /// the attempt before `deadline`): a new connection's time is the attempt's connect phase,
    /// a failure to connect is `failure(e)`, and no connection in time is `timeout_connect`
    /// naming `broker`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn get_within<E, F, Fut>(
        &self,
        broker: &str,
        deadline: Instant,
        connect_timeout: Duration,
        phases: &mut Phases,
        alive: impl Fn(&C) -> bool,
        connect: F,
        failure: impl FnOnce(&E) -> Failure,
    ) -> Result<C, Failure>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<C, E>>,
    {
        let clock = Instant::now();
        let connect_by = (clock + connect_timeout).min(deadline);
        match tokio::time::timeout_at(connect_by, self.get(alive, connect)).await {
            Ok(Ok((c, new))) => {
                if new {
                    phases.connected = true;
                    phases.connect = clock.elapsed();
                }
                Ok(c)
            }
            Ok(Err(e)) => Err(failure(&e)),
            Err(_) => Err(Failure {
                kind: ErrorKind::ConnectTimeout,
                message: format!(
                    "no {broker} connection within {} ms",
                    clock.elapsed().as_millis()
                ),
            }),
        }
    }

    /// Forget the connection (after it failed), unless another attempt already replaced it.
    pub(super) async fn forget(&self, same: impl Fn(&C) -> bool) {
        let mut held = self.conn.lock().await;
        if held.as_ref().is_some_and(same) {
            *held = None;
        }
    }
}

/// A slot with when it was last used.
type Used<C> = (Arc<Slot<C>>, Instant);

/// The slots, by key, with when each was last used.
pub(super) struct Pool<K, C> {
    max: usize,
    slots: Mutex<HashMap<K, Used<C>>>,
}

impl<K: Hash + Eq + Clone, C> Pool<K, C> {
    /// A pool of at most `max` connections (at least one).
    pub(super) fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The slot for `key`, made (and the least recently used one dropped to keep within the
    /// bound) when there is none.
    pub(super) fn slot(&self, key: &K) -> Arc<Slot<C>> {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((slot, used)) = slots.get_mut(key) {
            *used = now;
            return slot.clone();
        }
        while slots.len() >= self.max {
            let Some(oldest) = slots
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            slots.remove(&oldest);
        }
        let slot = Arc::new(Slot {
            conn: tokio::sync::Mutex::new(None),
        });
        slots.insert(key.clone(), (slot.clone(), now));
        slot
    }

    /// How many slots are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_pool_keeps_at_most_its_bound_dropping_the_least_recently_used() {
        let pool: Pool<&str, u32> = Pool::new(2);
        let a = pool.slot(&"a");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        pool.slot(&"b");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        pool.slot(&"a");
        pool.slot(&"c");
        assert_eq!(pool.len(), 2);
        assert!(Arc::ptr_eq(&a, &pool.slot(&"a")), "a was used last: kept");
    }

    #[tokio::test]
    async fn a_slot_connects_once_and_again_after_a_failure() {
        let pool: Pool<&str, u32> = Pool::new(4);
        let slot = pool.slot(&"a");
        let (c, new) = slot
            .get(|_| true, || async { Ok::<_, ()>(1) })
            .await
            .unwrap();
        assert_eq!((c, new), (1, true));
        let (c, new) = slot
            .get(|_| true, || async { Ok::<_, ()>(2) })
            .await
            .unwrap();
        assert_eq!((c, new), (1, false));
        slot.forget(|c| *c == 1).await;
        let (c, new) = slot
            .get(|_| true, || async { Ok::<_, ()>(3) })
            .await
            .unwrap();
        assert_eq!((c, new), (3, true));
    }
}
