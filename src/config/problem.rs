//! One shape for a setting out of range, shared by every settings type.
//!
//! Each settings type states its own rules in a `problems(&self) -> Vec<SettingProblem>` that
//! lists every value out of range (an empty list: the settings are valid). Configuration parses
//! the text it is given, fills the settings, collects their problems and names each one by its
//! flag, so every bad value is reported together.

use std::fmt;

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
pub(crate) fn shown(d: std::time::Duration) -> String {
    format!("{d:?}")
}

/// Joins problems for one error message, `; ` between them.
pub(crate) fn joined(problems: &[SettingProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

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
}
