//! The one duration syntax of every duration flag: `10s`, `500ms`, `2m`,
//! `1h`, `1.5s`, `1m30s` (humantime's units, plus decimals).
//!
//! Flags that used to take a plain number (`--ttl-ms 10000`,
//! `--duration-secs 10`) keep their old name as an alias, and on them a bare
//! number still means what it meant: [`or_bare`]. Everywhere else a bare
//! number is refused ([`parse`]), since `--ttl 10` could mean 10 s or 10 ms.

use std::ops::RangeInclusive;
use std::time::Duration;

/// Parses a duration such as `10s`, `500ms`, `2m`, `1h`, `1.5s` or `1m30s`.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let error = |reason: &str| DurationError { input: input.to_string(), reason: reason.to_string() };
    let mut rest = input.trim();
    if rest.is_empty() {
        return Err(error("empty"));
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let value: f64 = number.parse().map_err(|_| error("expected a number"))?;
        let unit_secs = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(error("missing unit")),
            _ => return Err(error("unknown unit (use ms, s, m or h)")),
        };
        let part = Duration::try_from_secs_f64(value * unit_secs).map_err(|_| error("out of range"))?;
        total = total.checked_add(part).ok_or_else(|| error("out of range"))?;
        rest = after;
    }
    Ok(total)
}

/// A value parser for a flag that took a plain number of some unit before
/// it took durations: `unit(n)` for a bare number `n`, else [`parse`]; the
/// result must lie in `range`.
pub fn or_bare(
    unit: fn(u64) -> Duration,
    range: RangeInclusive<Duration>,
) -> impl Fn(&str) -> Result<Duration, DurationError> + Clone + Send + Sync + 'static {
    move |input| {
        let duration = match input.trim().parse::<u64>() {
            Ok(n) => unit(n),
            Err(_) => parse(input)?,
        };
        within(input, duration, &range)
    }
}

fn within(input: &str, duration: Duration, range: &RangeInclusive<Duration>) -> Result<Duration, DurationError> {
    if range.contains(&duration) {
        return Ok(duration);
    }
    let (min, max) = (range.start(), range.end());
    let reason = format!("must be from {min:?} to {max:?}");
    Err(DurationError { input: input.to_string(), reason })
}

/// `duration` in whole milliseconds, as the API and the node config take it
/// (saturating: the cluster refuses out-of-range values with a clear error).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (examples: 10s, 500ms, 2m, 1m30s)")]
pub struct DurationError {
    input: String,
    reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures every unit parses, alone and combined, and malformed input does not.
    #[test]
    fn durations_parse() {
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        for bad in ["", "10", "s", "10x", "-1s", "1..2s", "10 s"] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    // Ensures an old `-ms` flag still reads a bare number as milliseconds,
    // takes durations too, and refuses values out of its range.
    #[test]
    fn bare_numbers_keep_their_old_unit() {
        let ms = or_bare(Duration::from_millis, Duration::from_millis(10)..=Duration::from_secs(10));
        assert_eq!(ms("100"), Ok(Duration::from_millis(100)));
        assert_eq!(ms("2s"), Ok(Duration::from_secs(2)));
        assert!(ms("5").is_err() && ms("11s").is_err() && ms("ten").is_err());
        let secs = or_bare(Duration::from_secs, Duration::ZERO..=Duration::MAX);
        assert_eq!(secs("20"), Ok(Duration::from_secs(20)));
    }
}
