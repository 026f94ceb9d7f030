//! How commands print: JSON answers, and times as RFC 3339.

pub use tally_recording::rfc3339;

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
