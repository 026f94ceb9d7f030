//! The embedded store's edge rows keep the event's id packed: an edge row is mostly that id,
//! and a window's writes rewrite the pages its edges are on, so fewer bytes a row is fewer pages
//! written and copied back (BENCHMARKS, "Edge rows packed"). The codec keeps what it cannot pack
//! as its text, and reads back exactly what was written.

/// [`event_id_into`]'s tag of an id kept as its UTF-8 text.
const ID_TEXT: u8 = 0;
/// [`event_id_into`]'s tag of lowercase hexadecimal digits, an even number of them.
const ID_HEX_EVEN: u8 = 1;
/// [`event_id_into`]'s tag of lowercase hexadecimal digits, an odd number of them.
const ID_HEX_ODD: u8 = 2;
/// [`event_id_into`]'s tag of a UUID in its lowercase canonical form (8-4-4-4-12 digits).
const ID_UUID: u8 = 3;
/// Where a canonical UUID has its hyphens.
const UUID_HYPHENS: [usize; 4] = [8, 13, 18, 23];

fn is_hex(c: u8) -> bool {
    matches!(c, b'0'..=b'9' | b'a'..=b'f')
}

fn hex_value(c: u8) -> u8 {
    if c <= b'9' {
        c - b'0'
    } else {
        c - b'a' + 10
    }
}

/// Lowercase hexadecimal digits two a byte, an odd last one in the high half: false, with
/// `out` as it was, if one is not a digit.
fn pack_hex(digits: &[u8], out: &mut Vec<u8>) -> bool {
    let start = out.len();
    out.reserve(digits.len().div_ceil(2));
    let mut pairs = digits.chunks_exact(2);
    for pair in &mut pairs {
        if !(is_hex(pair[0]) && is_hex(pair[1])) {
            out.truncate(start);
            return false;
        }
        out.push(hex_value(pair[0]) << 4 | hex_value(pair[1]));
    }
    if let [last] = pairs.remainder() {
        if !is_hex(*last) {
            out.truncate(start);
            return false;
        }
        out.push(hex_value(*last) << 4);
    }
    true
}

fn unpack_hex(packed: &[u8], out: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in packed {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

/// The encoding of an event's id, for an edge row's column: lowercase hexadecimal digits (the
/// generator's ids, a hash's) are a tag (1 for an even count, 2 for odd) and the digits two a
/// byte; a UUID in its lowercase canonical form is a tag (3) and its 16 bytes; any other id is a
/// tag (0) and its text. A producer names its events as it likes: an id of another form costs
/// one byte more than its text.
///
/// Written into `out`, cleared first: a writer of many edges keeps one buffer.
pub fn event_id_into(id: &str, out: &mut Vec<u8>) {
    out.clear();
    let b = id.as_bytes();
    let uuid = b.len() == 36
        && b.iter().enumerate().all(|(i, c)| {
            if UUID_HYPHENS.contains(&i) {
                *c == b'-'
            } else {
                is_hex(*c)
            }
        });
    if uuid {
        out.push(ID_UUID);
        let mut start = 0;
        for end in UUID_HYPHENS.into_iter().chain([b.len()]) {
            pack_hex(&b[start..end], out);
            start = end + 1;
        }
        return;
    }
    out.push(if b.len().is_multiple_of(2) {
        ID_HEX_EVEN
    } else {
        ID_HEX_ODD
    });
    if b.is_empty() || !pack_hex(b, out) {
        out.clear();
        out.push(ID_TEXT);
        out.extend_from_slice(b);
    }
}

/// An id [`event_id_into`] encoded, decoded: an encoding it cannot have written is an error.
pub fn event_id_from(b: &[u8]) -> Result<String, String> {
    let bad = |why: &str| format!("its event id does not decode: {why}");
    let mut out = String::new();
    match b.split_first() {
        Some((&ID_TEXT, text)) => {
            return String::from_utf8(text.to_vec()).map_err(|_| bad("its text is not UTF-8"))
        }
        Some((&ID_HEX_EVEN, packed)) if !packed.is_empty() => unpack_hex(packed, &mut out),
        Some((&ID_HEX_ODD, packed)) if packed.last().is_some_and(|l| l & 0x0f == 0) => {
            unpack_hex(packed, &mut out);
            out.pop();
        }
        Some((&ID_UUID, packed)) if packed.len() == 16 => {
            unpack_hex(packed, &mut out);
            for at in UUID_HYPHENS {
                out.insert(at, '-');
            }
        }
        Some((tag @ (&ID_HEX_EVEN | &ID_HEX_ODD | &ID_UUID), _)) => {
            return Err(bad(&format!(
                "its digits (tag {tag}) end where they cannot"
            )))
        }
        Some((tag, _)) => return Err(bad(&format!("it is tagged {tag} (0 to 3)"))),
        None => return Err(bad("it is empty")),
    }
    Ok(out)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A codec's write and read.
    type Codec = (fn(&str, &mut Vec<u8>), fn(&[u8]) -> Result<String, String>);
    const ID: Codec = (event_id_into, event_id_from);

    /// `text` as `codec` writes it, into a buffer that held something else.
    pub(in crate::rows) fn packed(codec: fn(&str, &mut Vec<u8>), text: &str) -> Vec<u8> {
        let mut out = vec![9; 40];
        codec(text, &mut out);
        out
    }

    /// Each text reads back whole; `tag`: the tag each is written with.
    fn reads_back((into, from): Codec, tag: Option<u8>, texts: &[&str]) {
        for t in texts {
            let bytes = packed(into, t);
            if let Some(tag) = tag {
                assert_eq!(bytes[0], tag, "{t}");
            }
            assert_eq!(from(&bytes).unwrap(), *t);
        }
    }

    /// Each encoding is one the codec cannot have written: an error.
    fn refused((_, from): Codec, encodings: &[&[u8]]) {
        for bad in encodings {
            assert!(from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_id_of_hex_digits_or_a_uuid_packs_to_half() {
        // The generator's ids: 27 digits in 15 bytes.
        let generated = "1a2494d4901000003feeec495a3";
        assert_eq!(packed(event_id_into, generated).len(), 15);
        assert_eq!(packed(event_id_into, "ab01"), vec![ID_HEX_EVEN, 0xab, 0x01]);
        assert_eq!(packed(event_id_into, "abc"), vec![ID_HEX_ODD, 0xab, 0xc0]);
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        assert_eq!(packed(event_id_into, uuid).len(), 17);
        reads_back(ID, None, &[generated, "ab01", "abc", "0", uuid]);
        // Not of those forms: kept as text, whole.
        let other = [
            "",
            "ABC",
            "g1",
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "0f8fad5b-d9cb-469f-a165-70867728950",
        ];
        reads_back(ID, Some(ID_TEXT), &other);
    }

    #[test]
    fn an_id_that_does_not_decode_is_an_error() {
        let bad: [&[u8]; 7] = [
            &[],
            &[4, 1],
            &[ID_HEX_EVEN],
            &[ID_HEX_ODD, 0xab, 0xc1],
            &[ID_HEX_ODD],
            &[ID_UUID, 1, 2],
            &[ID_TEXT, 0xff],
        ];
        refused(ID, &bad);
    }

    proptest! {
        /// Every id reads back as it was written, packed or not.
        #[test]
        fn every_id_reads_back(
            id in "[0-9a-f]{0,40}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|.{0,40}",
        ) {
            prop_assert_eq!(event_id_from(&packed(event_id_into, &id)).unwrap(), id);
        }

    }
}
