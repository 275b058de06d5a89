//! The auto-sizer: with `--concurrency auto`, the global pool follows live load.
//!
//! The pool bounds what is claimed and not yet settled: attempts in flight and claimed
//! deliveries waiting at their lanes hold it alike. Little's Law on that measured occupancy
//! (`L` = its time average) sizes the pool for a utilisation of 88 %, `L ÷ 0.88`: a pool sized
//! right sits in 85–95 %, and part of what it holds grows with it (a slow endpoint's lane is a
//! share of the pool, and fills it), so the utilisation it reaches lands a few points above the
//! target, near the band's middle. Erlang C on the
//! attempts' own load (for a 50 ms mean queue wait) takes over where it asks for more, as it does
//! at small loads, where queueing needs a wider margin.
//!
//! Measured occupancy cannot see past a full pool: when it is nearly always full, what is held
//! is what the pool allows, not what is offered. So a pool found busy 98 % of two intervals in a
//! row grows by half at least; one such interval alone grows it by a tenth, since a few seconds'
//! burst fills a pool sized for 88 % too, and growing by half for each would keep the pool a
//! third idle (a slow endpoint's lane, a share of the pool, fills what the pool grows by). A
//! smaller size is approached a tenth per decision, so a lull does not undo it.

use std::sync::Arc;
use std::time::Duration;

use super::Concurrency;
use super::Ctx;

/// How often the pool's busy share is sampled.
const SAMPLE: Duration = Duration::from_secs(1);
/// Samples per decision.
const SAMPLES_PER_DECISION: u32 = 5;
/// The utilisation the pool is sized for.
const TARGET_UTILISATION: f64 = 0.88;
/// Busy share of the pool above which it counts as saturated.
const SATURATED: f64 = 0.98;

/// With `--concurrency auto`, re-size the global bound every five seconds.
pub(super) async fn autosize(ctx: Arc<Ctx>) {
    let Concurrency::Auto { min, max } = ctx.settings.concurrency else {
        return;
    };
    let mut interval = tokio::time::interval(SAMPLE);
    interval.tick().await;
    let (mut share, mut occupancy, mut samples) = (0.0, 0.0, 0u32);
    let mut saturated_before = false;
    loop {
        interval.tick().await;
        let pool = ctx.view(super::Look::Pool).pool;
        // Claimed deliveries waiting at a lane hold the pool's room as much as attempts do:
        // the leaser claims only while fewer than the concurrency are outstanding.
        let held = pool.outstanding.max(pool.in_flight as usize) as f64;
        occupancy += held;
        share += (held / f64::from(pool.concurrency.max(1))).min(1.0);
        samples += 1;
        if samples < SAMPLES_PER_DECISION {
            continue;
        }
        let n = f64::from(samples);
        let measured = Measured {
            busy_share: share / n,
            occupancy: occupancy / n,
            load: pool.load.unwrap_or_default(),
        };
        (share, occupancy, samples) = (0.0, 0.0, 0);
        let current = ctx.concurrency();
        let wanted = next_concurrency(current, &measured, saturated_before, min, max);
        saturated_before = measured.busy_share >= SATURATED;
        let (rate, mean) = (measured.load.arrivals_per_s, measured.load.mean_service_s);
        if wanted != current {
            tracing::info!(
                from = current,
                to = wanted,
                busy_share = measured.busy_share,
                occupancy = measured.occupancy,
                arrival_per_s = rate,
                mean_service_s = mean,
                "auto concurrency changed"
            );
            ctx.set_concurrency(wanted);
        }
    }
}

/// What one decision interval measured of the pool.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Measured {
    /// Time share of the pool held (claimed and not settled ÷ concurrency), 0–1.
    pub(super) busy_share: f64,
    /// Deliveries claimed and not settled, time average.
    pub(super) occupancy: f64,
    /// Attempts' arrival rate and mean duration.
    pub(super) load: super::view::Load,
}

/// The next pool size (see the module docs): `max(L ÷ 0.88, Erlang C)`, at least ×1.5 when the
/// pool was saturated in this interval and the one before (`saturated_before`), at least ×1.1
/// when only in this one, shrinking by at most a tenth; within `[min, max]`.
pub(super) fn next_concurrency(
    current: u32,
    m: &Measured,
    saturated_before: bool,
    min: u32,
    max: u32,
) -> u32 {
    let erlang = recommended_concurrency(m.load.arrivals_per_s, m.load.mean_service_s, min, max);
    let littles = (m.occupancy / TARGET_UTILISATION)
        .ceil()
        .min(f64::from(u32::MAX)) as u32;
    let sized = erlang.max(littles);
    let next = if m.busy_share >= SATURATED {
        let factor = if saturated_before { 1.5 } else { 1.1 };
        sized.max((f64::from(current) * factor).ceil() as u32)
    } else if sized < current {
        sized.max((f64::from(current) * 0.9).floor() as u32)
    } else {
        sized
    };
    next.clamp(min, max)
}

/// Erlang C pool for a 50 ms mean queue wait, clamped to the operator's bounds.
pub(super) fn recommended_concurrency(
    rate_per_s: f64,
    mean_service_s: f64,
    min: u32,
    max: u32,
) -> u32 {
    let load = rate_per_s * mean_service_s;
    if load.is_nan() || load <= 0.0 {
        return min;
    }
    crate::sizing::servers_for_mean_wait(load, mean_service_s, 0.05)
        .unwrap_or(max)
        .clamp(min, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatcher::view::Load;

    fn measured(busy_share: f64, occupancy: f64, rate: f64, mean: f64) -> Measured {
        Measured {
            busy_share,
            occupancy,
            load: Load {
                arrivals_per_s: rate,
                mean_service_s: mean,
            },
        }
    }

    /// A pool saturated two intervals running grows by half even when what it measured (capped
    /// by the pool itself) says it is big enough; saturated in one interval only, by a tenth.
    #[test]
    fn a_pool_saturated_twice_grows_by_half_and_once_by_a_tenth() {
        let full = measured(1.0, 16.0, 100.0, 0.16);
        assert_eq!(next_concurrency(16, &full, true, 16, 4096), 24);
        assert_eq!(next_concurrency(4000, &full, true, 16, 4096), 4096);
        let burst = measured(0.99, 40.0, 100.0, 0.16);
        assert_eq!(next_concurrency(60, &burst, false, 16, 4096), 66);
        assert_eq!(next_concurrency(60, &burst, true, 16, 4096), 90);
    }

    /// Little's Law on the occupancy sizes the pool for 88 % when it asks for more than Erlang C
    /// (45 held on average: 52); Erlang C decides at small loads; a smaller pool is approached
    /// a tenth at a time; a pool busy 97 % of the time is not saturated.
    #[test]
    fn an_unsaturated_pool_is_sized_for_eighty_eight_percent_and_shrinks_gently() {
        let busy = measured(0.7, 45.0, 100.0, 0.16);
        assert_eq!(next_concurrency(64, &busy, false, 16, 4096), 57);
        assert_eq!(next_concurrency(50, &busy, true, 16, 4096), 52);
        let nearly = measured(0.97, 45.0, 100.0, 0.16);
        assert_eq!(next_concurrency(50, &nearly, true, 16, 4096), 52);
        let erlang = recommended_concurrency(100.0, 0.16, 16, 4096);
        let light = measured(0.3, 10.0, 100.0, 0.16);
        assert!(erlang > 16 && erlang < 40, "{erlang}");
        assert_eq!(next_concurrency(16, &light, false, 16, 4096), erlang);
        assert_eq!(
            next_concurrency(200, &measured(0.0, 0.0, 0.0, 0.0), true, 16, 4096),
            180
        );
        assert_eq!(
            next_concurrency(17, &measured(0.0, 0.0, 0.0, 0.0), false, 16, 4096),
            16
        );
    }
}
