//! Whole numbers as JSON has them: `3`, `3.0` and `3e0` are one number, and a field the
//! document says is an integer takes each of them (serde alone refuses a float for `u32`, which
//! clients that keep every number as a double, JavaScript's among them, send). A fraction, a
//! negative number or one past the field's type is still refused, naming the field.
//!
//! `#[serde(default, deserialize_with = "super::whole::option")]` on an `Option<u32>`,
//! `#[serde(default, deserialize_with = "super::whole::double_option")]` on a field that may
//! also be `null` (see `super::body::double_option`).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};

/// A `u32` written as any JSON number with no fraction.
struct Whole(u32);

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(WholeVisitor)
    }
}

struct WholeVisitor;

impl WholeVisitor {
    fn fits<E: de::Error>(n: u64, unexpected: Unexpected<'_>) -> Result<Whole, E> {
        u32::try_from(n)
            .map(Whole)
            .map_err(|_| E::invalid_value(unexpected, &WholeVisitor))
    }
}

impl Visitor<'_> for WholeVisitor {
    type Value = Whole;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an integer from 0 to {}", u32::MAX)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Whole, E> {
        Self::fits(n, Unexpected::Unsigned(n))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Whole, E> {
        let unexpected = Unexpected::Signed(n);
        u64::try_from(n)
            .map_err(|_| E::invalid_value(unexpected, &self))
            .and_then(|n| Self::fits(n, unexpected))
    }

    fn visit_f64<E: de::Error>(self, x: f64) -> Result<Whole, E> {
        let unexpected = Unexpected::Float(x);
        if x.fract() != 0.0 || !x.is_finite() {
            return Err(E::invalid_type(unexpected, &self));
        }
        if !(0.0..=f64::from(u32::MAX)).contains(&x) {
            return Err(E::invalid_value(unexpected, &self));
        }
        Ok(Whole(x as u32))
    }
}

/// An optional `u32` (`null` or absent: `None`).
pub(crate) fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Ok(Option::<Whole>::deserialize(d)?.map(|w| w.0))
}

/// A `u32` that may be left out (`None`: keep) or `null` (`Some(None)`: back to the default).
pub(crate) fn double_option<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<u32>>, D::Error> {
    option(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Limits {
        #[serde(default, deserialize_with = "option")]
        lane: Option<u32>,
        #[serde(default, deserialize_with = "double_option")]
        ceiling: Option<Option<u32>>,
    }

    fn read(json: &str) -> Result<Limits, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn an_integral_float_is_the_integer() {
        let l = read(r#"{"lane": 3.0, "ceiling": 16100.0}"#).unwrap();
        assert_eq!((l.lane, l.ceiling), (Some(3), Some(Some(16100))));
        let l = read(r#"{"lane": 1e3, "ceiling": 4294967295}"#).unwrap();
        assert_eq!((l.lane, l.ceiling), (Some(1000), Some(Some(u32::MAX))));
        let l = read(r#"{"lane": -0.0}"#).unwrap();
        assert_eq!(l.lane, Some(0));
    }

    #[test]
    fn absent_and_null_keep_their_meaning() {
        let l = read("{}").unwrap();
        assert_eq!((l.lane, l.ceiling), (None, None));
        let l = read(r#"{"lane": null, "ceiling": null}"#).unwrap();
        assert_eq!((l.lane, l.ceiling), (None, Some(None)));
    }

    #[test]
    fn fractions_negatives_and_overflow_are_refused() {
        for bad in [
            r#"{"lane": 3.5}"#,
            r#"{"lane": -1}"#,
            r#"{"lane": -1.0}"#,
            r#"{"lane": 4294967296}"#,
            r#"{"lane": 4294967296.0}"#,
            r#"{"lane": 1e300}"#,
            r#"{"lane": "3"}"#,
            r#"{"ceiling": true}"#,
        ] {
            let e = read(bad).unwrap_err();
            assert!(e.contains("an integer from 0 to 4294967295"), "{bad}: {e}");
        }
    }
}
