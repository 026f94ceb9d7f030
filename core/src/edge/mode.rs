//! The count modes, and the items beside a store's counts that say how it was counted: its mode,
//! the one stream it counts, and a rebuild under way.

/// What a post's count is: the users who like it now, or the distinct like events minus the
/// distinct unlike events (for counters that really are events: claps, views).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CountMode {
    /// A post's count is its users whose latest action is a like (the default).
    #[default]
    Likers,
    /// A post's count is its distinct like events less its unlike events (claps, views).
    Events,
}

impl CountMode {
    /// Its name in settings and in the store (`likers`, `events`).
    pub fn as_str(self) -> &'static str {
        match self {
            CountMode::Likers => "likers",
            CountMode::Events => "events",
        }
    }

    /// Whether the store keeps each (post, user)'s latest action, an edge: counting likers. What
    /// only such a store can do follows from it — say who likes what, count a table's change
    /// records, be rebuilt from its edges — and what only an events store can (a count as it
    /// stood at a past time) from its absence.
    pub fn keeps_edges(self) -> bool {
        self == CountMode::Likers
    }

    /// The application whose windows hold a store's counts (and whose workers show them to the
    /// read side): counting likers, the counter's second stage; counting events, the counter.
    pub fn counts_app(self) -> &'static str {
        match self {
            CountMode::Likers => crate::apps::CHANGES,
            CountMode::Events => crate::apps::COUNTER,
        }
    }

    /// The mode a name names, if any.
    pub fn parse(s: &str) -> Option<CountMode> {
        match s {
            "likers" => Some(CountMode::Likers),
            "events" => Some(CountMode::Events),
            _ => None,
        }
    }
}

impl<'de> serde::Deserialize<'de> for CountMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        CountMode::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("expected one of `likers`, `events`, got `{name}`"))
        })
    }
}

impl std::fmt::Display for CountMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a store keeps the mode it counts in (the counts table, partition [`MODE_PK`]).
pub const MODE_PK: &str = "#meta";
/// A store's own items, in partition [`MODE_PK`] beside its counts, each holding one text field.
/// The mode and the stream, once claimed, are never deleted: only the rebuild marker is
/// (`ports::StoreMeta::delete_rebuilding`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaItem {
    /// What the store counts (`mode`: a [`CountMode`]).
    Mode,
    /// The one stream the store is counted from (`v`: `kinesis:<region>:<stream>`, or
    /// `embedded:<stream>`): a store counted from two streams — two regions' counters on one
    /// table set — would mix their per-shard items, whose keys are shard ids every stream has
    /// (docs/REGIONS.md).
    Stream,
    /// A `tally rebuild` into this store has begun and not finished (`v`: the source it copies
    /// from): counters refuse the store until it is gone (`counter::claim`), a rerun of the
    /// rebuild resumes it.
    Rebuilding,
}

impl MetaItem {
    /// Its sort key.
    pub fn sk(self) -> &'static str {
        match self {
            MetaItem::Mode => "count",
            MetaItem::Stream => "stream",
            MetaItem::Rebuilding => "rebuilding",
        }
    }

    /// The field its value is in.
    pub fn field(self) -> &'static str {
        match self {
            MetaItem::Mode => "mode",
            MetaItem::Stream | MetaItem::Rebuilding => "v",
        }
    }
}
