//! What the configuration types share: a range check that names the key, and the error it
//! gives. Each library's configuration type (the counter's, analytics', a worker's, the
//! generator's) is deserialized from its section of the settings with its defaults, and checks
//! its own ranges with [`range`]; the binary adds the section's name to the key. And how an
//! application reads the stream ([`ReadMode`]), a setting of the counter's and analytics'.

use std::fmt;
use std::time::Duration;

/// A value outside what its key accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{key}` must be {expected}, got {got}")]
pub struct Invalid {
    /// The key, dotted from its section (`counter.window_ms`) once the section is known.
    pub key: String,
    /// What was expected, in words (`between 1 and 600000`).
    pub expected: String,
    /// The value given.
    pub got: String,
}

impl Invalid {
    /// A value of `key` that is not `expected`.
    pub fn new(key: &str, expected: impl Into<String>, got: impl fmt::Display) -> Invalid {
        Invalid {
            key: key.to_owned(),
            expected: expected.into(),
            got: got.to_string(),
        }
    }

    /// The same, with its key under `section`.
    pub fn in_section(mut self, section: &str) -> Invalid {
        self.key = format!("{section}.{}", self.key);
        self
    }
}

/// `key` must be within `lo..=hi`.
pub fn range<T: PartialOrd + fmt::Display>(key: &str, v: T, lo: T, hi: T) -> Result<(), Invalid> {
    if v < lo || v > hi {
        return Err(Invalid::new(key, format!("between {lo} and {hi}"), v));
    }
    Ok(())
}

/// A duration as a settings key in milliseconds (`…_ms`) gives it.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_out_of_range_names_its_key_and_the_range() {
        assert_eq!(range("window_ms", 5u64, 1, 10), Ok(()));
        let e = range("window_ms", 0u64, 1, 10)
            .unwrap_err()
            .in_section("counter");
        assert_eq!(
            e.to_string(),
            "`counter.window_ms` must be between 1 and 10, got 0"
        );
    }
}

/// How an application reads Kinesis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadMode {
    /// GetRecords: 5 reads/s and 2 MB/s per shard, shared by every application on the stream.
    #[default]
    Polling,
    /// Enhanced fan-out: a consumer registered for the application, records pushed over
    /// SubscribeToShard (2 MB/s per shard of its own).
    Efo,
}

impl<'de> serde::Deserialize<'de> for ReadMode {
    /// By name, and an unknown name is answered with the valid ones.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        match name.as_str() {
            "polling" => Ok(ReadMode::Polling),
            "efo" => Ok(ReadMode::Efo),
            _ => Err(serde::de::Error::custom(format!(
                "expected one of `polling`, `efo`, got `{name}`"
            ))),
        }
    }
}
