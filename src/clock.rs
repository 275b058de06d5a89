//! Wall-clock time in Unix epoch milliseconds, the unit the store speaks, and its RFC 3339 form,
//! the one the API speaks (`2026-11-30T14:05:09.123Z`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Convert epoch milliseconds to a `SystemTime`.
pub fn to_system_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64)
}

/// Earliest instant [`parse_rfc3339`] accepts and [`rfc3339`] writes faithfully: 0000-01-01.
const MIN_MS: i64 = -62_167_219_200_000;
/// Latest: 9999-12-31T23:59:59.999Z (four-digit years only, as RFC 3339 requires).
const MAX_MS: i64 = 253_402_300_799_999;

/// Epoch milliseconds as RFC 3339 in UTC with milliseconds: `2026-11-30T14:05:09.123Z`.
/// Instants outside years 0000–9999 are clamped to them (RFC 3339 has four-digit years).
pub fn rfc3339(ms: i64) -> String {
    let ms = ms.clamp(MIN_MS, MAX_MS);
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ms.rem_euclid(1000)
    )
}

/// Epoch milliseconds as `2026-11-30 14:05:09 UTC`, for people (the console, event details).
pub fn human(ms: i64) -> String {
    let text = rfc3339(ms);
    format!("{} {} UTC", &text[..10], &text[11..19])
}

/// Parse an RFC 3339 date-time (`2026-11-30T14:05:09Z`, `…09.5+02:00`, `t` and `z` allowed,
/// fractions past milliseconds truncated) into epoch milliseconds.
pub fn parse_rfc3339(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not an RFC 3339 date-time like 2026-11-30T14:05:09Z");
    // RFC 3339 is ASCII: anything else is refused before a field is sliced at a fixed byte
    // offset, which could otherwise fall inside a multi-byte character.
    if !text.is_ascii() {
        return Err(bad());
    }
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let num = |from: usize, to: usize| -> Result<i64, String> {
        let part = &text[from..to];
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let mut at = 19;
    let mut millis = 0;
    if b[at] == b'.' {
        let start = at + 1;
        at = start;
        while at < b.len() && b[at].is_ascii_digit() {
            at += 1;
        }
        if at == start {
            return Err(bad());
        }
        let digits = &text[start..at.min(start + 3)];
        millis = digits.parse::<i64>().map_err(|_| bad())? * 10_i64.pow(3 - digits.len() as u32);
    }
    let offset_s = match &b[at..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return Err(bad());
            }
            let hours = i64::from((h1 - b'0') * 10 + (h2 - b'0'));
            let minutes = i64::from((m1 - b'0') * 10 + (m2 - b'0'));
            if hours > 23 || minutes > 59 {
                return Err(bad());
            }
            let s = hours * 3600 + minutes * 60;
            if *sign == b'-' { -s } else { s }
        }
        _ => return Err(bad()),
    };
    // A leap second (`:60`) is read as the last millisecond of its minute's 59th second.
    let leap = second == 60;
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(format!("{text:?} is not a valid date and time"));
    }
    let days = days_from_civil(year, month as u32, day as u32);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset_s;
    let ms = secs * 1000 + if leap { 999 } else { millis };
    Ok(ms.clamp(MIN_MS, MAX_MS))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// (year, month, day) → days since 1970-01-01: the inverse of [`civil_from_days`].
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_649_367_553_123), "2022-04-07T21:39:13.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(human(1_649_367_553_123), "2022-04-07 21:39:13 UTC");
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_offsets_fractions_and_case() {
        let at = 1_649_367_553_000;
        for text in [
            "2022-04-07T21:39:13Z",
            "2022-04-07t21:39:13z",
            "2022-04-07T23:39:13+02:00",
            "2022-04-07T16:09:13-05:30",
            "2022-04-07 21:39:13Z",
        ] {
            assert_eq!(parse_rfc3339(text), Ok(at), "{text}");
        }
        assert_eq!(parse_rfc3339("2022-04-07T21:39:13.5Z"), Ok(at + 500));
        assert_eq!(
            parse_rfc3339("2022-04-07T21:39:13.123456789Z"),
            Ok(at + 123)
        );
        assert_eq!(parse_rfc3339("2016-12-31T23:59:60Z"), Ok(1_483_228_799_999));
    }

    #[test]
    fn refuses_what_is_not_rfc_3339() {
        for text in [
            "",
            "2022-04-07",
            "2022-04-07T21:39:13",
            "2022-04-07T21:39Z",
            "2022-13-07T21:39:13Z",
            "2022-02-30T21:39:13Z",
            "2021-02-29T00:00:00Z",
            "2022-04-07T24:00:00Z",
            "2022-04-07T21:39:13.Z",
            "2022-04-07T21:39:13+0200",
            "2022-04-07T21:39:13+24:00",
            "1649367553",
            "+022-04-07T21:39:13Z",
            "2022-04-07T21:39:13Zjunk",
            // A multi-byte character where a digit belongs (a slice there would split it).
            "2026-01-01T00:00:\u{20ac}Z",
            "2026-01-01T00:00:0\u{20ac}Z",
            "2026-01-01T00:\u{e9}0:00Z",
            "2026-01-\u{e9}1T00:00:00Z",
            "2026-01-01T00:00:00.\u{20ac}Z",
            "2026-01-01T00:00:00+0\u{e9}:00",
        ] {
            assert!(parse_rfc3339(text).is_err(), "{text:?} accepted");
        }
    }

    proptest! {
        #[test]
        fn what_is_written_reads_back(ms in MIN_MS..=MAX_MS) {
            prop_assert_eq!(parse_rfc3339(&rfc3339(ms)), Ok(ms));
        }

        #[test]
        fn any_text_is_an_answer_never_a_panic(text in "\\PC{0,40}") {
            let _ = parse_rfc3339(&text);
        }

        #[test]
        fn any_character_anywhere_in_an_instant_is_an_answer(
            at in 0usize..25,
            c in any::<char>(),
        ) {
            let mut text: Vec<char> = "2026-11-30T14:05:09.123+02:00".chars().collect();
            text[at] = c;
            let _ = parse_rfc3339(&text.into_iter().collect::<String>());
        }

        #[test]
        fn days_round_trip(days in -800_000i64..3_000_000) {
            let (y, m, d) = civil_from_days(days);
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
