//! Who holds a listener's connection slots: at most `max` connections at once, at most
//! `per_peer` from one peer, and when a new connection finds either bound reached, a
//! connection waiting on its client gives its slot up instead of the new one being refused:
//! the one idle longest (between keep-alive requests, or silent since it was accepted), or
//! failing that the one longest in the middle of a request head (a stalled or trickled head
//! must not hold a slot against new clients). Only when every connection in the way has a
//! request in the service is the new one refused. So neither idle sockets nor slow heads can
//! lock clients out, and one peer cannot take the listener.
//!
//! A peer is an IPv4 address, or an IPv6 /64 ([`peer`]): whoever has one IPv6 address
//! usually has its whole /64, so counting each address apart would be no limit at all.
//!
//! An evicted connection is asked to close the way a draining one is (hyper's graceful
//! shutdown): idle or in a head, it closes at once; if a request reached the service in the
//! meantime, that request is answered first.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::connection::Activity;

/// The peer a connection from `addr` counts against: an IPv4 address (written as IPv4-mapped
/// IPv6 or not) is its own peer, an IPv6 address counts as its /64.
pub fn peer(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & (u128::MAX << 64))),
        v4 => v4,
    }
}

/// Why a connection gets no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Every slot of the listener is held by a busy connection.
    Listener,
    /// Every slot this peer may hold is held by a busy connection of its own.
    Peer,
}

/// The slots of one listener.
pub struct Slots {
    max: usize,
    per_peer: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    next: u64,
    open: HashMap<u64, Holder>,
    peers: HashMap<IpAddr, usize>,
}

struct Holder {
    peer: IpAddr,
    activity: Arc<Activity>,
    evict: CancellationToken,
}

impl Held {
    /// The connection to make room among those `eligible`: the one idle longest, else the one
    /// longest in a request head; `None` when every one has a request in the service.
    fn first_to_go(&self, eligible: impl Fn(&Holder) -> bool) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, h)| eligible(h))
            .filter_map(|(id, h)| h.activity.stall().map(|stall| (stall, *id)))
            .min()
            .map(|(_, id)| id)
    }

    /// Forget connection `id`; returns its holder.
    fn remove(&mut self, id: u64) -> Option<Holder> {
        let holder = self.open.remove(&id)?;
        if let Some(n) = self.peers.get_mut(&holder.peer) {
            *n -= 1;
            if *n == 0 {
                self.peers.remove(&holder.peer);
            }
        }
        Some(holder)
    }

    /// Take connection `id`'s slot and tell it to close.
    fn evict(&mut self, id: u64) {
        if let Some(holder) = self.remove(id) {
            holder.evict.cancel();
        }
    }
}

/// A slot held by a connection; dropping it frees the slot.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().remove(self.id);
    }
}

impl Slots {
    /// Slots for at most `max` connections, at most `per_peer` of them from one [`peer`].
    pub fn new(max: usize, per_peer: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            per_peer: per_peer.clamp(1, max.max(1)),
            held: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection from `addr`, whose progress `activity` records and which closes
    /// when `evict` is cancelled; and how many connections were told to close for it.
    pub fn admit(
        self: &Arc<Self>,
        addr: IpAddr,
        activity: Arc<Activity>,
        evict: CancellationToken,
    ) -> Result<(Slot, u64), Full> {
        let peer = peer(addr);
        let mut held = self.lock();
        let mut evicted = 0;
        if held.peers.get(&peer).copied().unwrap_or(0) >= self.per_peer {
            let id = held.first_to_go(|h| h.peer == peer).ok_or(Full::Peer)?;
            held.evict(id);
            evicted += 1;
        }
        if held.open.len() >= self.max {
            let id = held.first_to_go(|_| true).ok_or(Full::Listener)?;
            held.evict(id);
            evicted += 1;
        }
        let id = held.next;
        held.next += 1;
        held.open.insert(
            id,
            Holder {
                peer,
                activity,
                evict,
            },
        );
        *held.peers.entry(peer).or_default() += 1;
        drop(held);
        let slot = Slot {
            slots: Arc::clone(self),
            id,
        };
        Ok((slot, evicted))
    }

    /// Connections holding a slot now.
    pub fn held(&self) -> usize {
        self.lock().open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_idle_connection_makes_room_and_busy_ones_do_not() {
        let slots = Slots::new(3, 3);
        let mut kept = Vec::new();
        let mut tokens = Vec::new();
        for n in 0..3 {
            let activity = Activity::new();
            let evict = CancellationToken::new();
            let (slot, evicted) = slots.admit(ip(n), activity.clone(), evict.clone()).unwrap();
            assert_eq!(evicted, 0);
            kept.push((slot, activity.clone()));
            tokens.push(evict);
            tokio::time::advance(std::time::Duration::from_secs(1)).await;
        }
        // The first is busy: the second, idle longest of the rest, is the one to go.
        let _busy = kept[0].1.begin_request();
        let fourth = Activity::new();
        let (fourth_slot, evicted) = slots
            .admit(ip(9), fourth.clone(), CancellationToken::new())
            .unwrap();
        assert_eq!(evicted, 1);
        assert!(!tokens[0].is_cancelled() && tokens[1].is_cancelled());
        assert!(!tokens[2].is_cancelled());
        assert_eq!(slots.held(), 3);
        // With everyone busy the next is refused.
        let _b2 = kept[2].1.begin_request();
        let _b4 = fourth.begin_request();
        let full = slots.admit(ip(8), Activity::new(), CancellationToken::new());
        assert!(matches!(full, Err(Full::Listener)));
        drop(kept);
        assert_eq!(
            slots.held(),
            1,
            "dropped slots are freed, the evicted one once"
        );
        drop(fourth_slot);
        assert_eq!(slots.held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn one_address_is_held_to_its_share() {
        let slots = Slots::new(10, 2);
        let mut held = Vec::new();
        for _ in 0..2 {
            let activity = Activity::new();
            held.push((
                slots
                    .admit(ip(1), activity.clone(), CancellationToken::new())
                    .unwrap(),
                activity.begin_request(),
            ));
        }
        let refused = slots.admit(ip(1), Activity::new(), CancellationToken::new());
        assert!(matches!(refused, Err(Full::Peer)));
        // The same address written as IPv4-mapped IPv6 is the same peer.
        let mapped = IpAddr::from(std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
        let refused = slots.admit(mapped, Activity::new(), CancellationToken::new());
        assert!(matches!(refused, Err(Full::Peer)));
        assert!(
            slots
                .admit(ip(2), Activity::new(), CancellationToken::new())
                .is_ok()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stalled_heads_make_room_oldest_head_first_after_idle_ones() {
        let slots = Slots::new(3, 3);
        let second = std::time::Duration::from_secs(1);
        // A stalls in its first head; B is served and then idle; C stalls in its head too.
        let a = Activity::new();
        let a_evict = CancellationToken::new();
        let _a = slots.admit(ip(1), a.clone(), a_evict.clone()).unwrap();
        a.read(10);
        tokio::time::advance(second).await;
        let b = Activity::new();
        let b_evict = CancellationToken::new();
        let _b = slots.admit(ip(2), b.clone(), b_evict.clone()).unwrap();
        b.read(10);
        drop(b.begin_request());
        tokio::time::advance(second).await;
        let c = Activity::new();
        let c_evict = CancellationToken::new();
        let _c = slots.admit(ip(3), c.clone(), c_evict.clone()).unwrap();
        c.read(10);
        tokio::time::advance(second).await;
        // A trickles a byte: its head is still the oldest.
        a.read(1);
        // The idle connection goes first…
        let d = Activity::new();
        let (_d, evicted) = slots
            .admit(ip(4), d.clone(), CancellationToken::new())
            .unwrap();
        assert_eq!(evicted, 1);
        assert!(b_evict.is_cancelled() && !a_evict.is_cancelled() && !c_evict.is_cancelled());
        let _d_busy = d.begin_request();
        // …then the head begun longest ago, however recent its last byte…
        let e = Activity::new();
        let (_e, evicted) = slots
            .admit(ip(5), e.clone(), CancellationToken::new())
            .unwrap();
        assert_eq!(evicted, 1);
        assert!(a_evict.is_cancelled() && !c_evict.is_cancelled());
        let _e_busy = e.begin_request();
        // …and the same within one address's share.
        let slots = Slots::new(10, 2);
        let (x, y) = (Activity::new(), Activity::new());
        let (x_evict, y_evict) = (CancellationToken::new(), CancellationToken::new());
        let _x = slots.admit(ip(1), x.clone(), x_evict.clone()).unwrap();
        x.read(10);
        tokio::time::advance(second).await;
        let _y = slots.admit(ip(1), y.clone(), y_evict.clone()).unwrap();
        y.read(10);
        let (_z, evicted) = slots
            .admit(ip(1), Activity::new(), CancellationToken::new())
            .unwrap();
        assert_eq!(evicted, 1);
        assert!(x_evict.is_cancelled() && !y_evict.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn an_ipv6_peer_is_its_64_and_an_ipv4_peer_its_address() {
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let slots = Slots::new(10, 2);
        let mut held = Vec::new();
        for addr in ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"] {
            let activity = Activity::new();
            held.push((
                slots
                    .admit(v6(addr), activity.clone(), CancellationToken::new())
                    .unwrap(),
                activity.begin_request(),
            ));
        }
        // A third address in the same /64 is the same peer…
        let refused = slots.admit(
            v6("2001:db8:1:2::3"),
            Activity::new(),
            CancellationToken::new(),
        );
        assert!(matches!(refused, Err(Full::Peer)));
        // …the next /64 is another.
        assert!(
            slots
                .admit(
                    v6("2001:db8:1:3::1"),
                    Activity::new(),
                    CancellationToken::new()
                )
                .is_ok()
        );
        // IPv4 neighbours stay apart, and IPv4 written as IPv4-mapped IPv6 is its IPv4.
        assert_eq!(peer(v6("2001:db8:1:2:3:4:5:6")), v6("2001:db8:1:2::"));
        assert_eq!(peer(ip(7)), ip(7));
        assert_eq!(peer(v6("::ffff:10.0.0.7")), ip(7));
        for last in [1, 2] {
            let activity = Activity::new();
            held.push((
                slots
                    .admit(ip(last), activity.clone(), CancellationToken::new())
                    .unwrap(),
                activity.begin_request(),
            ));
        }
        assert!(
            slots
                .admit(ip(3), Activity::new(), CancellationToken::new())
                .is_ok()
        );
    }
}
