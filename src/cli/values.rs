//! The values flags take, parsed and checked: each a clap `value_parser` whose error says what
//! was expected.

/// An `--format` value.
pub fn input_format(s: &str) -> Result<tally_core::input::Format, String> {
    match s {
        "events" => Ok(tally_core::input::Format::Events),
        "dynamodb" => Ok(tally_core::input::Format::Dynamodb),
        _ => Err(format!("expected `events` or `dynamodb`, got `{s}`")),
    }
}

/// `--speed`: a factor above 0, or `max` (infinity: as fast as possible).
pub fn replay_speed(s: &str) -> Result<f64, String> {
    if s.eq_ignore_ascii_case("max") {
        return Ok(f64::INFINITY);
    }
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!(
            "{s:?}: expected a factor above 0 (1: as recorded, 10: ten times faster) or max"
        )),
    }
}

/// `--memory`: a size of at least 1 KiB.
pub fn memory_size(s: &str) -> Result<u64, String> {
    let n = s
        .parse::<bytesize::ByteSize>()
        .map_err(|e| format!("expected a size such as 512MiB or 2GiB ({e})"))?
        .as_u64();
    if n < 1024 {
        return Err(format!("expected at least 1KiB, got {n} bytes"));
    }
    Ok(n)
}

/// A `--since` time, fixed once, when the flags are read: epoch milliseconds (what the query asks
/// from), and how long before then it was (what is printed back). A time given as an RFC 3339
/// time or as epoch milliseconds is that time however long the command takes to ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Since {
    /// The time (ms since the epoch).
    pub ms: i64,
    /// How long before the flags were read.
    pub ago: std::time::Duration,
}

/// A `--since`: a duration longer than zero (15m, 2h, 7d), an RFC 3339 time or epoch
/// milliseconds, in the past.
pub fn since_time(s: &str) -> Result<Since, String> {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    let now = SystemTime::now();
    let at = |t: SystemTime| -> Result<Since, String> {
        match (now.duration_since(t), t.duration_since(UNIX_EPOCH)) {
            (Ok(ago), Ok(ms)) if !ago.is_zero() => Ok(Since {
                ms: i64::try_from(ms.as_millis()).unwrap_or(i64::MAX),
                ago,
            }),
            (_, Err(_)) => Err(format!(
                "{s} ago is before 1970-01-01T00:00:00Z, the earliest time a like can have"
            )),
            _ => Err(format!("{s:?} is not in the past")),
        }
    };
    // Epoch milliseconds: digits only (a duration always has a unit).
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        let ms: u64 = s
            .parse()
            .map_err(|_| format!("{s:?} is too large for epoch milliseconds"))?;
        return at(UNIX_EPOCH + Duration::from_millis(ms));
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return at(t);
    }
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be longer than 0 (e.g. 15m, 2h, 7d)".into()),
        Ok(d) => match now.checked_sub(d) {
            Some(t) => at(t),
            None => Err(format!(
                "{s} ago is before 1970-01-01T00:00:00Z, the earliest time a like can have"
            )),
        },
        Err(_) => Err(format!(
            "must be a duration (15m, 2h, 7d), an RFC 3339 time (2026-12-01T08:00:00Z) or epoch milliseconds, got {s:?}"
        )),
    }
}

/// A `--timeout`: a duration longer than 0, said in the words `--since` uses.
pub fn timeout_duration(s: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be longer than 0 (e.g. 30s, 5m)".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("must be a duration like 30s or 5m: {e}")),
    }
}

/// `HOST:PORT` as a socket address: an IP address, or a host name resolved now (`localhost:8080`).
pub fn socket_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let hint = "expected HOST:PORT, e.g. 127.0.0.1:8080 or localhost:8080";
    match s.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{s:?} names no address ({hint})")),
        Err(e) => Err(format!("{hint}: {e}")),
    }
}

/// A `--log-level` value: a level, or a filter of `target=level` directives. A word that is
/// neither (`verbose`) would be taken as a target name and silently turn logging off.
pub fn log_filter(s: &str) -> Result<String, String> {
    const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];
    for d in s.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if !d.contains('=') && !LEVELS.contains(&d.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{d:?} is not a level (error, warn, info, debug, trace, off) nor a directive such as tally_consumer=debug"
            ));
        }
    }
    Ok(s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A time given whole is that time, to the millisecond, however long after it is read; a
    /// duration is taken back from when the flags were read.
    #[test]
    fn an_absolute_since_is_kept_exactly() {
        let t = since_time("2026-12-01T08:00:59Z").unwrap();
        assert_eq!(t.ms, 1_796_112_059_000);
        assert_eq!(since_time("1796112059000").unwrap().ms, 1_796_112_059_000);
        let before = tally_core::clock::now_ms();
        let d = since_time("15m").unwrap();
        let after = tally_core::clock::now_ms();
        assert!(
            (before - 900_000..=after - 900_000).contains(&d.ms),
            "{d:?}"
        );
        assert!(since_time("0s").is_err() && since_time("tomorrow").is_err());
    }
}
