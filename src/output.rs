//! How commands print: JSON answers, and times as RFC 3339.

use std::time::Duration;

/// Epoch milliseconds as an RFC 3339 time, to the second (a time before 1970 shows as 1970).
pub fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `n` likes in words: "1 like", "2 likes", "0 likes".
pub fn likes(n: i64) -> String {
    match n {
        1 => "1 like".into(),
        n => format!("{n} likes"),
    }
}

/// Prints a JSON answer, pretty, on standard output.
pub fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}
