//! A window's edge record: the (post, user) pairs it writes, stored before its first edge write.

/// The most bytes of pairs one stored chunk of a window's edge record holds (DynamoDB: an item
/// stays below 400 KB with its keys).
pub const WINDOW_EDGES_CHUNK_BYTES: usize = 300 * 1024;

/// What a stored chunk of a window's edge record holds beside its pairs (keys, count, expiry),
/// bytes: for its write units.
pub const WINDOW_EDGES_KEY_BYTES: usize = 100;

/// A window's edge record: the (post, user) pairs it writes, stored before the first of its edge
/// writes, so that a window given up — its records trimmed from the stream while it was pending
/// — can still find the edges it wrote and count them
/// ([`EdgeState::written_by`](super::EdgeState::written_by)). Encoded as length-prefixed ids
/// (u16, little-endian), cut into chunks of at most [`WINDOW_EDGES_CHUNK_BYTES`].
pub fn encode_pairs<S: AsRef<str>>(pairs: &[(S, S)]) -> Vec<Vec<u8>> {
    let mut chunks = vec![Vec::new()];
    for (post, user) in pairs {
        let (post, user) = (post.as_ref(), user.as_ref());
        let need = 4 + post.len() + user.len();
        if chunks
            .last()
            .is_some_and(|c| !c.is_empty() && c.len() + need > WINDOW_EDGES_CHUNK_BYTES)
        {
            chunks.push(Vec::new());
        }
        let c = chunks.last_mut().expect("one chunk at least");
        for id in [post, user] {
            // Ids are at most a few hundred bytes (the event contract's limits).
            let len = u16::try_from(id.len()).unwrap_or(u16::MAX);
            c.extend_from_slice(&len.to_le_bytes());
            c.extend_from_slice(&id.as_bytes()[..usize::from(len)]);
        }
    }
    chunks
}

/// Decodes one chunk of [`encode_pairs`]; an error says what is wrong with it.
pub fn decode_pairs(mut b: &[u8]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let take = |b: &mut &[u8]| -> Result<String, String> {
        let (len, rest) = b
            .split_first_chunk::<2>()
            .ok_or("a window's edge record ends inside a length")?;
        let len = usize::from(u16::from_le_bytes(*len));
        if rest.len() < len {
            return Err("a window's edge record ends inside an id".into());
        }
        let (id, rest) = rest.split_at(len);
        *b = rest;
        String::from_utf8(id.to_vec()).map_err(|e| format!("a window's edge record: {e}"))
    };
    while !b.is_empty() {
        let post = take(&mut b)?;
        let user = take(&mut b)?;
        out.push((post, user));
    }
    Ok(out)
}
