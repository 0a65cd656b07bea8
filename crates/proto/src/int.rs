//! Integers in request bodies as JSON Schema means them: `7`, and also
//! `7.0` or `7e0` (a number with no fractional part is an integer there,
//! and the OpenAPI document says `"type": "integer"`). serde reads only the
//! first into a `u64`; these read all three, and refuse fractions,
//! negatives and values beyond `u64` as before.

use serde::de::{Deserializer, Error, Unexpected, Visitor};

struct U64;

impl Visitor<'_> for U64 {
    type Value = u64;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a non-negative integer")
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<u64, E> {
        // 2^64 is exact as f64; every integral f64 below it fits a u64.
        if v.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&v) {
            Ok(v as u64)
        } else {
            Err(E::invalid_value(Unexpected::Float(v), &self))
        }
    }
}

/// `#[serde(deserialize_with = "crate::int::token")]`: a fencing token, at
/// most [`MAX_TOKEN`](crate::MAX_TOKEN).
pub fn token<'de, D: Deserializer<'de>>(d: D) -> Result<crate::FencingToken, D::Error> {
    let token = u64(d)?;
    if token > crate::MAX_TOKEN {
        return Err(D::Error::invalid_value(Unexpected::Unsigned(token), &"a token below 2^53"));
    }
    Ok(crate::FencingToken::granted_at(token))
}

/// `#[serde(deserialize_with = "crate::int::u64")]`
pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(U64)
}

/// `#[serde(default, deserialize_with = "crate::int::option_u64")]`: `null` is `None`.
pub fn option_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct Opt;
    impl<'de> Visitor<'de> for Opt {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a non-negative integer or null")
        }

        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            u64(d).map(Some)
        }
    }
    d.deserialize_option(Opt)
}

/// `#[serde(deserialize_with = "crate::int::u32")]`: a count (a semaphore's
/// limit or permits), at most `u32::MAX`.
pub fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u64(d)?;
    u32::try_from(n).map_err(|_| D::Error::invalid_value(Unexpected::Unsigned(n), &"a count below 2^32"))
}

/// `#[serde(default, deserialize_with = "crate::int::option_u32")]`: `null` is `None`.
pub fn option_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match option_u64(d)? {
        Some(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| D::Error::invalid_value(Unexpected::Unsigned(n), &"a count below 2^32")),
        None => Ok(None),
    }
}

/// `#[serde(default, deserialize_with = "crate::int::option_token")]`: a
/// log index (token or session id) at most [`MAX_TOKEN`](crate::MAX_TOKEN), or `null`.
pub fn option_token<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match option_u64(d)? {
        Some(index) if index > crate::MAX_TOKEN => {
            Err(D::Error::invalid_value(Unexpected::Unsigned(index), &"a log index below 2^53"))
        }
        index => Ok(index),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct T {
        #[serde(deserialize_with = "super::u64")]
        n: u64,
        #[serde(default, deserialize_with = "super::option_u64")]
        m: Option<u64>,
    }

    fn read(json: &str) -> Result<(u64, Option<u64>), String> {
        serde_json::from_str::<T>(json).map(|t| (t.n, t.m)).map_err(|e| e.to_string())
    }

    // Ensures integral numbers are read in every JSON spelling, and everything else refused.
    #[test]
    fn integral_numbers_in_any_spelling() {
        assert_eq!(read(r#"{"n": 7}"#), Ok((7, None)));
        assert_eq!(read(r#"{"n": 7.0, "m": 3e3}"#), Ok((7, Some(3000))));
        assert_eq!(read(r#"{"n": 18446744073709551615, "m": null}"#), Ok((u64::MAX, None)));
        for bad in [
            r#"{"n": 7.5}"#,
            r#"{"n": -1}"#,
            r#"{"n": -1.0}"#,
            r#"{"n": 1e20}"#,
            r#"{"n": "7"}"#,
            r#"{"n": 1, "m": 0.5}"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
