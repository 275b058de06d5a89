//! One shape for a setting out of range, shared by every settings type, and the duration
//! syntax every setting is written in. A leaf: it imports nothing of sluice's, so each
//! component keeps its settings beside its code and configuration gathers them from above.
//!
//! Each settings type states its own rules in a `problems(&self) -> Vec<SettingProblem>` that
//! lists every value out of range (an empty list: the settings are valid). Configuration parses
//! the text it is given, fills the settings, collects their problems and names each one by its
//! flag, so every bad value is reported together.

use std::fmt;
use std::time::Duration;

/// A setting outside its valid range: which field, the value, and what would be valid.
///
/// It reads as a sentence, `{field}: {value} must be {valid}`, e.g.
/// `lane_share: 2 must be in (0, 1]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value} must be {valid}")]
pub struct SettingProblem {
    /// The settings field at fault, spelled as in its struct (`lane_share`, `timeouts.connect`).
    pub field: &'static str,
    /// The refused value, as text (`2`, `10s`); never a secret itself.
    pub value: String,
    /// What would be valid, completing "must be …" (`in (0, 1]`, `1s–60s`).
    pub valid: String,
}

impl SettingProblem {
    /// A problem with `field`, showing `value` and what is `valid`.
    pub fn new(field: &'static str, value: impl fmt::Display, valid: impl fmt::Display) -> Self {
        Self {
            field,
            value: value.to_string(),
            valid: valid.to_string(),
        }
    }

    /// The same sentence under another name, such as the flag the value came from.
    pub fn named(&self, name: &str) -> String {
        format!("{name}: {} must be {}", self.value, self.valid)
    }
}

/// Collects the problems of one settings type: each rule is one `check`.
#[derive(Debug, Default)]
pub(crate) struct Problems(Vec<SettingProblem>);

impl Problems {
    /// Records a problem with `field` unless `ok`.
    pub(crate) fn check(
        &mut self,
        ok: bool,
        field: &'static str,
        value: impl fmt::Display,
        valid: impl fmt::Display,
    ) {
        if !ok {
            self.0.push(SettingProblem::new(field, value, valid));
        }
    }

    /// Every problem recorded, in the order of the checks.
    pub(crate) fn into_vec(self) -> Vec<SettingProblem> {
        self.0
    }
}

/// A duration as the problems show it (`500ms`, `10s`).
pub(crate) fn shown(d: Duration) -> String {
    format!("{d:?}")
}

/// Parse a duration with units: `500ms`, `3s`, `5m`, `2h`, `5d`, `1h30m` (humantime's syntax; a
/// bare number is refused: units are required), at most a year.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let duration =
        humantime::parse_duration(text).map_err(|e| format!("{text:?} is not a duration: {e}"))?;
    if duration > Duration::from_secs(365 * 86_400) {
        return Err(format!("{text:?} is out of range (at most a year)"));
    }
    Ok(duration)
}

/// Joins problems for one error message, `; ` between them.
pub(crate) fn joined(problems: &[SettingProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A raw setting that may be unset: [`Fill::fill`] takes `other`'s value when `self` has none,
/// so flags and the environment win over the settings file.
pub trait Fill {
    /// Take `other` where `self` is unset.
    fn fill(&mut self, other: Self);
}

impl<T> Fill for Option<T> {
    fn fill(&mut self, other: Self) {
        if self.is_none() {
            *self = other;
        }
    }
}

/// A list is unset when empty: a list given as flags replaces the file's, never adds to it.
impl<T> Fill for Vec<T> {
    fn fill(&mut self, other: Self) {
        if self.is_empty() {
            *self = other;
        }
    }
}

/// A key only ever refused (`admin-token` in the file) holds nothing to fill.
impl Fill for () {
    fn fill(&mut self, _: ()) {}
}

/// Declares a struct of raw settings (every field [`Fill`]: optional, a list, or another such
/// struct) and its `or`, which fills every unset field from another (the settings file's):
/// each field is written once, in the struct, and nowhere else.
macro_rules! raw_settings {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field_vis:vis $field:ident : $ty:ty
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $(
                $(#[$field_meta])*
                $field_vis $field: $ty,
            )*
        }

        impl $crate::setting::Fill for $name {
            fn fill(&mut self, other: Self) {
                $( $crate::setting::Fill::fill(&mut self.$field, other.$field); )*
            }
        }

        impl $name {
            /// Fill every unset field of `self` from `file`.
            pub fn or(mut self, file: $name) -> $name {
                $crate::setting::Fill::fill(&mut self, file);
                self
            }
        }
    };
}
pub(crate) use raw_settings;

/// Parses each duration given as text into its setting, naming a value that does not parse by
/// its flag: `prefix` and the raw field's name with dashes (`lease_ttl` is `lease-ttl`). A
/// value that does not parse keeps the default and is added to `errors`.
macro_rules! parse_durations {
    ($errors:expr, $prefix:expr, $raw:expr; $($field:ident => $into:expr),* $(,)?) => {
        $(
            if let Some(text) = $raw.$field.as_deref() {
                match $crate::setting::parse_duration(text) {
                    Ok(duration) => $into = duration,
                    Err(e) => $errors.push(format!(
                        "{}{}: {e}",
                        $prefix,
                        stringify!($field).replace('_', "-")
                    )),
                }
            }
        )*
    };
}
pub(crate) use parse_durations;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_reads_as_a_sentence_under_its_field_or_its_flag() {
        let p = SettingProblem::new("lane_share", 2.0, "in (0, 1]");
        assert_eq!(p.to_string(), "lane_share: 2 must be in (0, 1]");
        assert_eq!(p.named("lane-share"), "lane-share: 2 must be in (0, 1]");
        let mut all = Problems::default();
        all.check(true, "lane_size", 8, "1–10000");
        all.check(false, "lane_size", 0, "1–10000");
        let mut all = all.into_vec();
        all.push(p);
        assert_eq!(
            joined(&all),
            "lane_size: 0 must be 1–10000; lane_share: 2 must be in (0, 1]"
        );
    }

    #[test]
    fn durations_need_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("3").is_err());
        assert!(parse_duration("400d").is_err());
        assert!(parse_duration("3 parsecs").is_err());
    }
}
