//! Rules of thumb for pool size: the Little's Law floor and square-root staffing.

use serde::Serialize;

/// Little's Law: mean busy workers (offered load in erlangs) = arrival rate × mean service time.
pub fn littles_law_floor(arrival_rate_per_s: f64, service_time_s: f64) -> f64 {
    arrival_rate_per_s * service_time_s
}

/// Whole workers needed to cover `load_erlangs` busy on average: `ceil(load)`, ignoring
/// floating-point noise of one part in 10⁹ (so 900/s × 1.4 s gives 1,260, not 1,261).
pub fn workers_floor(load_erlangs: f64) -> u32 {
    let tolerance = 1e-9 * load_erlangs.abs().max(1.0);
    // `as` saturates: NaN and negatives give 0, huge loads give u32::MAX.
    (load_erlangs - tolerance).ceil() as u32
}

/// Square-root staffing coefficient β (1.0 ..= 2.0 for interactive service levels).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StaffingBeta(f64);

impl StaffingBeta {
    /// Smallest accepted β.
    pub const MIN: f64 = 1.0;
    /// Largest accepted β.
    pub const MAX: f64 = 2.0;
    /// β used when none is given.
    pub const DEFAULT: f64 = 1.5;

    /// Accepts β in `MIN..=MAX`; returns `None` otherwise (including NaN).
    pub fn new(beta: f64) -> Option<Self> {
        (Self::MIN..=Self::MAX)
            .contains(&beta)
            .then_some(Self(beta))
    }

    /// The coefficient's value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Default for StaffingBeta {
    fn default() -> Self {
        Self(Self::DEFAULT)
    }
}

/// Square-root staffing level before rounding: `load + β·√load` workers.
pub fn sqrt_staffing_level(load_erlangs: f64, beta: StaffingBeta) -> f64 {
    load_erlangs + beta.get() * load_erlangs.sqrt()
}

/// Square-root staffing rule: `ceil(load + β·√load)` workers.
pub fn sqrt_staffing(load_erlangs: f64, beta: StaffingBeta) -> u32 {
    // `as` saturates: NaN and negatives give 0.
    sqrt_staffing_level(load_erlangs, beta).ceil() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_square_root_staffing_figures() {
        let beta = |b| StaffingBeta::new(b).expect("beta in range");
        // Staffing figures quoted in prose are the levels rounded to the nearest worker...
        assert_eq!(sqrt_staffing_level(1_260.0, beta(1.0)).round(), 1_295.0);
        assert_eq!(sqrt_staffing_level(1_260.0, beta(2.0)).round(), 1_331.0);
        assert_eq!(sqrt_staffing_level(5.0, beta(1.0)).round(), 7.0);
        assert_eq!(sqrt_staffing_level(5.0, beta(2.0)).round(), 9.0);
        // ...while the rule itself rounds up, never staffing below load + β√load.
        assert_eq!(sqrt_staffing(1_260.0, beta(1.0)), 1_296);
        assert_eq!(sqrt_staffing(1_260.0, beta(2.0)), 1_331);
        assert_eq!(sqrt_staffing(5.0, beta(1.0)), 8);
        assert_eq!(sqrt_staffing(5.0, beta(2.0)), 10);
        assert_eq!(sqrt_staffing(1_260.0, StaffingBeta::default()), 1_314);
    }

    #[test]
    fn beta_outside_one_to_two_is_refused() {
        assert!(StaffingBeta::new(0.99).is_none());
        assert!(StaffingBeta::new(2.01).is_none());
        assert!(StaffingBeta::new(f64::NAN).is_none());
        assert_eq!(StaffingBeta::new(1.0).map(StaffingBeta::get), Some(1.0));
    }

    #[test]
    fn floor_ignores_float_noise_but_rounds_up_real_fractions() {
        assert_eq!(workers_floor(littles_law_floor(900.0, 1.4)), 1_260);
        assert_eq!(workers_floor(1_260.000_000_000_2), 1_260);
        assert_eq!(workers_floor(1_260.01), 1_261);
        assert_eq!(workers_floor(0.0), 0);
        assert_eq!(workers_floor(-3.0), 0);
    }
}
