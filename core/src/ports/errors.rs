//! The one error every port returns, and its result type.

/// Every error a port returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// The write's lease condition failed: another worker owns the shard, or the progress recorded
    /// with the checkpoint is not what the writer expected.
    #[error("lease or checkpoint condition failed for {app}/{shard_id}")]
    Fenced {
        /// The application whose row refused the write.
        app: String,
        /// The shard whose row refused it.
        shard_id: String,
    },
    /// The backend asked us to slow down.
    #[error("throttled: {0}")]
    Throttled(String),
    /// A concurrent write touched the same item (DynamoDB TransactionConflict, SQLite busy).
    #[error("write conflict: {0}")]
    Conflict(String),
    /// The call did not complete in time; it may or may not have taken effect.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A shard iterator expired; the reader re-opens after its last delivered record.
    #[error("shard iterator expired: {0}")]
    IteratorExpired(String),
    /// The stream, a table or a shard does not exist.
    #[error("{what} does not exist{hint}")]
    NotFound {
        /// What is missing, named (`stream likes`, `table tally-counts`).
        what: String,
        /// What to do about it, with its leading punctuation (or empty).
        hint: String,
    },
    /// The endpoint did not answer.
    #[error("could not reach {endpoint}: {detail}")]
    Unavailable {
        /// The endpoint called.
        endpoint: String,
        /// Why it did not answer, as the SDK or the OS said.
        detail: String,
    },
    /// The credentials may not make this call on this resource.
    #[error("permission denied: {call} on {resource}: {detail}")]
    Permission {
        /// The API call refused (`dynamodb:UpdateItem`).
        call: String,
        /// The resource it was called on (a table, a stream).
        resource: String,
        /// The service's own words.
        detail: String,
    },
    /// A stored item is not what tally writes (`tally_core::rows`): which item, and what is wrong
    /// with it — never read as a default.
    #[error("a corrupt stored item {item}: {detail}")]
    Corrupt {
        /// The item, named (`leases counter/shardId-000000000000`).
        item: String,
        /// The field and what is wrong with it.
        detail: String,
    },
    /// The request was rejected as invalid: a bug in tally, said plainly.
    #[error("request rejected as invalid (a bug in tally): {0}")]
    Invalid(String),
    /// Anything else, said as the backend said it.
    #[error("{0}")]
    Other(String),
}

impl PortError {
    /// Whether the same call may succeed if tried again after a pause. An expired iterator is:
    /// the reader that answered it has taken a fresh one, right after its last delivered record.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            PortError::Throttled(_)
                | PortError::Conflict(_)
                | PortError::Timeout(_)
                | PortError::Unavailable { .. }
                | PortError::IteratorExpired(_)
        )
    }
}

/// Shorthand for port results.
pub type PortResult<T> = Result<T, PortError>;
