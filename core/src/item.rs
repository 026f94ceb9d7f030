//! A stored item as both stores hold it: its attributes (a number or a string each, as DynamoDB
//! types them), and what it costs by DynamoDB's published rules. Summary items and edges are
//! written as such attributes; this module knows nothing of either.

use std::collections::BTreeMap;

use crate::cost;

/// An attribute value: a number or a string.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Val {
    /// A number (DynamoDB `N`).
    N(i64),
    /// A string (DynamoDB `S`).
    S(String),
}

/// An item's attributes (its key apart).
pub type Attrs = BTreeMap<String, Val>;

/// DynamoDB's size of an item, by its published rules: attribute names and string values by
/// their UTF-8 bytes, a number by about one byte per two significant digits plus one.
pub fn item_size(pk: &str, sk: &str, attrs: &Attrs) -> usize {
    let val = |v: &Val| match v {
        Val::S(s) => s.len(),
        Val::N(n) => number_size(*n),
    };
    2 + pk.len() + 2 + sk.len() + attrs.iter().map(|(k, v)| k.len() + val(v)).sum::<usize>()
}

/// DynamoDB's size of a number: about one byte per two significant digits (trailing zeros do
/// not count), plus one.
pub fn number_size(n: i64) -> usize {
    let mut m = n.unsigned_abs();
    if m == 0 {
        return 2;
    }
    while m.is_multiple_of(10) {
        m /= 10;
    }
    let digits = m.ilog10() as usize + 1;
    digits.div_ceil(2) + 1
}

/// Write units of writing this item once (`cost::write_units`).
pub fn write_units(pk: &str, sk: &str, attrs: &Attrs) -> u64 {
    cost::write_units(item_size(pk, sk, attrs))
}
