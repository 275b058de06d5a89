//! Which traces are recorded: the OpenTelemetry samplers (`OTEL_TRACES_SAMPLER`), as a pure
//! function of the parent's flag and the trace id, so every attempt of a message, on any
//! dispatcher of the fleet, decides the same.

/// A sampler, as `OTEL_TRACES_SAMPLER` names it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    /// Record every trace.
    AlwaysOn,
    /// Record none.
    AlwaysOff,
    /// Record this fraction of traces (0–1), chosen by trace id.
    TraceIdRatio(f64),
    /// Follow the producer's `sampled` flag when the message came with a trace context; the
    /// inner sampler decides for the traces sluice starts.
    ParentBased(Root),
}

/// The sampler of a trace without a parent (under [`Sampler::ParentBased`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    /// Record every trace sluice starts.
    AlwaysOn,
    /// Record none of them.
    AlwaysOff,
    /// Record this fraction (0–1).
    TraceIdRatio(f64),
}

impl Default for Sampler {
    /// The OpenTelemetry default: `parentbased_always_on`.
    fn default() -> Self {
        Self::ParentBased(Root::AlwaysOn)
    }
}

/// The samplers `OTEL_TRACES_SAMPLER` may name here.
pub const SAMPLERS: &str = "always_on, always_off, traceidratio, parentbased_always_on, \
    parentbased_always_off or parentbased_traceidratio";

impl Sampler {
    /// The sampler `name` with its argument `arg` (the ratio of the `traceidratio` ones, 1 when
    /// not given; ignored by the others, as the specification says).
    pub fn parse(name: &str, arg: Option<&str>) -> Result<Self, String> {
        let ratio = || -> Result<f64, String> {
            let Some(text) = arg else { return Ok(1.0) };
            match text.trim().parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                _ => Err(format!("{text:?} must be a ratio in 0–1")),
            }
        };
        Ok(match name.trim() {
            "always_on" => Self::AlwaysOn,
            "always_off" => Self::AlwaysOff,
            "traceidratio" => Self::TraceIdRatio(ratio()?),
            "parentbased_always_on" => Self::ParentBased(Root::AlwaysOn),
            "parentbased_always_off" => Self::ParentBased(Root::AlwaysOff),
            "parentbased_traceidratio" => Self::ParentBased(Root::TraceIdRatio(ratio()?)),
            other => return Err(format!("{other:?} must be one of {SAMPLERS}")),
        })
    }

    /// Is the trace `trace_id` recorded, given the producer's `sampled` flag (`None`: sluice
    /// started the trace)?
    pub fn sampled(&self, parent_sampled: Option<bool>, trace_id: &[u8; 16]) -> bool {
        match (self, parent_sampled) {
            (Self::AlwaysOn, _) => true,
            (Self::AlwaysOff, _) => false,
            (Self::TraceIdRatio(r), _) => by_ratio(*r, trace_id),
            (Self::ParentBased(_), Some(sampled)) => sampled,
            (Self::ParentBased(Root::AlwaysOn), None) => true,
            (Self::ParentBased(Root::AlwaysOff), None) => false,
            (Self::ParentBased(Root::TraceIdRatio(r)), None) => by_ratio(*r, trace_id),
        }
    }
}

/// The `TraceIdRatioBased` rule of the OpenTelemetry SDKs: the trace id's last 8 bytes, as a
/// big-endian number shifted down to 63 bits, under `ratio` × 2⁶³.
fn by_ratio(ratio: f64, trace_id: &[u8; 16]) -> bool {
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let x = u64::from_be_bytes(low) >> 1;
    let bound = (ratio * (1u64 << 63) as f64) as u64;
    x < bound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samplers_are_read_by_their_standard_names() {
        assert_eq!(Sampler::parse("always_on", None), Ok(Sampler::AlwaysOn));
        assert_eq!(
            Sampler::parse("traceidratio", Some("0.25")),
            Ok(Sampler::TraceIdRatio(0.25))
        );
        assert_eq!(
            Sampler::parse("parentbased_traceidratio", None),
            Ok(Sampler::ParentBased(Root::TraceIdRatio(1.0)))
        );
        assert_eq!(
            Sampler::parse("always_off", Some("nonsense")),
            Ok(Sampler::AlwaysOff),
            "the argument of a sampler without one is ignored"
        );
        assert!(Sampler::parse("traceidratio", Some("1.5")).is_err());
        assert!(Sampler::parse("jaeger_remote", None).is_err());
    }

    #[test]
    fn a_parent_based_sampler_follows_the_producer() {
        let s = Sampler::default();
        let id = [7u8; 16];
        assert!(s.sampled(None, &id));
        assert!(s.sampled(Some(true), &id));
        assert!(!s.sampled(Some(false), &id));
        assert!(Sampler::AlwaysOn.sampled(Some(false), &id));
    }

    #[test]
    fn a_ratio_keeps_about_its_share_and_decides_the_same_every_time() {
        let s = Sampler::TraceIdRatio(0.25);
        let mut kept = 0;
        for i in 0u64..10_000 {
            let mut id = [0u8; 16];
            id[8..].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
            let once = s.sampled(None, &id);
            assert_eq!(once, s.sampled(None, &id));
            kept += usize::from(once);
        }
        assert!((2_300..=2_700).contains(&kept), "{kept}");
        assert!(!Sampler::TraceIdRatio(0.0).sampled(None, &[0xff; 16]));
        assert!(Sampler::TraceIdRatio(1.0).sampled(None, &[0xff; 16]));
    }
}
