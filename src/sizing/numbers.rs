//! Numbers as people read them: digits grouped in thousands (`1,234,567`).

/// `1234567` → `"1,234,567"`.
pub(crate) fn thousands(value: u64) -> String {
    use num_format::{Locale, ToFormattedString};
    value.to_formatted_string(&Locale::en)
}

/// `1260.04` with 1 decimal → `"1,260.0"`; non-finite values print as Rust does.
pub(crate) fn thousands_f64(value: f64, decimals: usize) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    let text = format!("{:.*}", decimals, value.abs());
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let sign = if value < 0.0 && text.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        "-"
    } else {
        ""
    };
    let whole = whole
        .parse::<u64>()
        .map_or_else(|_| whole.to_owned(), thousands);
    if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands_f64(1_260.04, 1), "1,260.0");
        assert_eq!(thousands_f64(-1_234.5, 0), "-1,234");
        assert_eq!(thousands_f64(f64::INFINITY, 1), "inf");
    }
}
