//! A stored row as an adapter hands it over: its fields as the backend holds them, nothing
//! decoded.

use std::collections::BTreeMap;

/// One stored value, as the backend holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// A number (DynamoDB `N`, SQLite `INTEGER`).
    N(i64),
    /// A string (`S`, `TEXT`).
    S(String),
    /// A boolean (`BOOL`).
    B(bool),
    /// A list of strings (`L` of `S`).
    L(Vec<String>),
    /// Bytes (`B`, `BLOB`).
    Bytes(Vec<u8>),
    /// Something no field of tally's is (another DynamoDB type, a number that is no `i64`, a
    /// real): what it was, for the error.
    Other(String),
}

/// A stored row: its fields by name (an absent or null one is not in it).
pub type Row = BTreeMap<String, Field>;
