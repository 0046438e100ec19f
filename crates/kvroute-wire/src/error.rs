//! The typed error of every decoder in this crate.

use core::fmt;

/// Why a frame, payload or telemetry document was rejected. A rejected batch yields no
/// events at all (never a partial batch). Every variant has an [`ErrorKind`] that
/// [`WireCounters`](crate::WireCounters) counts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// A ZMQ message with a number of frames other than 2 (`[seq, payload]`, older replay)
    /// or 3 (`[topic, seq, payload]`).
    FrameCount {
        /// Frames received.
        got: usize,
    },
    /// The sequence frame is not exactly 8 bytes (big-endian `u64`).
    SequenceLength {
        /// Its length in bytes.
        got: usize,
    },
    /// The topic frame is not UTF-8.
    TopicNotUtf8,
    /// A message whose payload is empty but whose sequence is not the replay end marker.
    EmptyPayload {
        /// The message's sequence number.
        seq: u64,
    },
    /// A message with the end-marker sequence (`u64::MAX`) and a non-empty payload.
    EndMarkerWithPayload {
        /// Payload length in bytes.
        len: usize,
    },
    /// The msgpack (or JSON) structure does not have the expected shape: truncated data,
    /// a wrong type, an invalid marker, nesting deeper than the decoder's limit.
    Malformed {
        /// What the underlying deserializer reported.
        detail: String,
    },
    /// Bytes left after the batch's msgpack value.
    TrailingBytes {
        /// How many bytes.
        len: usize,
    },
    /// A record whose first element (or `type` key) is missing or not a known tag where a
    /// tag is required (load frames must be `"LoadStat"`).
    UnexpectedTag {
        /// The tag found (empty when missing).
        tag: String,
    },
    /// A positional array shorter than its shortest known generation.
    TooFewFields {
        /// The record (`"batch"`, `"BlockStored"`, `"BlockRemoved"`, `"LoadStat"`).
        record: &'static str,
        /// Elements received, tag included.
        got: usize,
        /// Fewest elements accepted, tag included.
        min: usize,
    },
    /// A positional array longer than its longest known generation.
    TooManyFields {
        /// The record.
        record: &'static str,
        /// Elements received, tag included.
        got: usize,
        /// Most elements accepted, tag included.
        max: usize,
    },
    /// A required field of a named map (or a required position that was nil).
    MissingField {
        /// The record.
        record: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A binary block hash that is not 32 bytes long.
    HashSize {
        /// Its length in bytes.
        len: usize,
    },
    /// An integer field outside its valid range (block size 0, a negative rank, ...).
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value received.
        value: i64,
        /// The values it accepts (`"0..=4294967295"`, `"1..=4294967295"`).
        valid: &'static str,
    },
    /// A batch timestamp that is NaN or infinite (engines publish seconds since the Unix
    /// epoch, a finite float; the router compares them to tell a restart from a repeat).
    NonFiniteTimestamp {
        /// The value's IEEE-754 bits (`f64::to_bits`), so the error stays comparable.
        bits: u64,
    },
    /// `token_ids.len() != block_size * block_hashes.len()` in a `BlockStored`.
    TokenCount {
        /// Block hashes in the event.
        blocks: usize,
        /// Block size (tokens).
        block_size: u32,
        /// Token ids in the event.
        tokens: usize,
    },
    /// A Prometheus text line that could not be parsed.
    Prometheus {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        detail: &'static str,
    },
    /// A load document that reports a rank without one of the required metrics.
    MissingMetric {
        /// The DP rank.
        dp_rank: u32,
        /// The metric (or field) that is missing.
        metric: &'static str,
    },
    /// The same metric reported twice for one rank with different values.
    ConflictingSamples {
        /// The DP rank.
        dp_rank: u32,
        /// The metric.
        metric: &'static str,
    },
    /// The same DP rank listed twice in one load document.
    DuplicateRank {
        /// The DP rank.
        dp_rank: u32,
    },
    /// A load document without any rank.
    NoRanks,
}

/// The kind of a [`WireError`], without its details: the index of its counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`WireError::FrameCount`].
    FrameCount,
    /// [`WireError::SequenceLength`].
    SequenceLength,
    /// [`WireError::TopicNotUtf8`].
    TopicNotUtf8,
    /// [`WireError::EmptyPayload`].
    EmptyPayload,
    /// [`WireError::EndMarkerWithPayload`].
    EndMarkerWithPayload,
    /// [`WireError::Malformed`].
    Malformed,
    /// [`WireError::TrailingBytes`].
    TrailingBytes,
    /// [`WireError::UnexpectedTag`].
    UnexpectedTag,
    /// [`WireError::TooFewFields`].
    TooFewFields,
    /// [`WireError::TooManyFields`].
    TooManyFields,
    /// [`WireError::MissingField`].
    MissingField,
    /// [`WireError::HashSize`].
    HashSize,
    /// [`WireError::OutOfRange`].
    OutOfRange,
    /// [`WireError::NonFiniteTimestamp`].
    NonFiniteTimestamp,
    /// [`WireError::TokenCount`].
    TokenCount,
    /// [`WireError::Prometheus`].
    Prometheus,
    /// [`WireError::MissingMetric`].
    MissingMetric,
    /// [`WireError::ConflictingSamples`].
    ConflictingSamples,
    /// [`WireError::DuplicateRank`].
    DuplicateRank,
    /// [`WireError::NoRanks`].
    NoRanks,
}

impl ErrorKind {
    /// Number of kinds (the length of the counter array).
    pub const COUNT: usize = 20;

    /// Every kind, in counter order.
    pub const ALL: [ErrorKind; Self::COUNT] = [
        Self::FrameCount,
        Self::SequenceLength,
        Self::TopicNotUtf8,
        Self::EmptyPayload,
        Self::EndMarkerWithPayload,
        Self::Malformed,
        Self::TrailingBytes,
        Self::UnexpectedTag,
        Self::TooFewFields,
        Self::TooManyFields,
        Self::MissingField,
        Self::HashSize,
        Self::OutOfRange,
        Self::NonFiniteTimestamp,
        Self::TokenCount,
        Self::Prometheus,
        Self::MissingMetric,
        Self::ConflictingSamples,
        Self::DuplicateRank,
        Self::NoRanks,
    ];

    /// A stable `snake_case` name for counters and metric labels (`"token_count"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Self::FrameCount => "frame_count",
            Self::SequenceLength => "sequence_length",
            Self::TopicNotUtf8 => "topic_not_utf8",
            Self::EmptyPayload => "empty_payload",
            Self::EndMarkerWithPayload => "end_marker_with_payload",
            Self::Malformed => "malformed",
            Self::TrailingBytes => "trailing_bytes",
            Self::UnexpectedTag => "unexpected_tag",
            Self::TooFewFields => "too_few_fields",
            Self::TooManyFields => "too_many_fields",
            Self::MissingField => "missing_field",
            Self::HashSize => "hash_size",
            Self::OutOfRange => "out_of_range",
            Self::NonFiniteTimestamp => "non_finite_timestamp",
            Self::TokenCount => "token_count",
            Self::Prometheus => "prometheus",
            Self::MissingMetric => "missing_metric",
            Self::ConflictingSamples => "conflicting_samples",
            Self::DuplicateRank => "duplicate_rank",
            Self::NoRanks => "no_ranks",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl WireError {
    /// This error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::FrameCount { .. } => ErrorKind::FrameCount,
            Self::SequenceLength { .. } => ErrorKind::SequenceLength,
            Self::TopicNotUtf8 => ErrorKind::TopicNotUtf8,
            Self::EmptyPayload { .. } => ErrorKind::EmptyPayload,
            Self::EndMarkerWithPayload { .. } => ErrorKind::EndMarkerWithPayload,
            Self::Malformed { .. } => ErrorKind::Malformed,
            Self::TrailingBytes { .. } => ErrorKind::TrailingBytes,
            Self::UnexpectedTag { .. } => ErrorKind::UnexpectedTag,
            Self::TooFewFields { .. } => ErrorKind::TooFewFields,
            Self::TooManyFields { .. } => ErrorKind::TooManyFields,
            Self::MissingField { .. } => ErrorKind::MissingField,
            Self::HashSize { .. } => ErrorKind::HashSize,
            Self::OutOfRange { .. } => ErrorKind::OutOfRange,
            Self::NonFiniteTimestamp { .. } => ErrorKind::NonFiniteTimestamp,
            Self::TokenCount { .. } => ErrorKind::TokenCount,
            Self::Prometheus { .. } => ErrorKind::Prometheus,
            Self::MissingMetric { .. } => ErrorKind::MissingMetric,
            Self::ConflictingSamples { .. } => ErrorKind::ConflictingSamples,
            Self::DuplicateRank { .. } => ErrorKind::DuplicateRank,
            Self::NoRanks => ErrorKind::NoRanks,
        }
    }

    pub(crate) fn malformed(e: impl fmt::Display) -> Self {
        Self::Malformed {
            detail: e.to_string(),
        }
    }
}

/// The values a `u32` field accepts, as [`WireError::OutOfRange`] states them.
pub(crate) const U32_RANGE: &str = "0..=4294967295";
/// The block sizes accepted (tokens per block, at least 1).
pub(crate) const BLOCK_SIZE_RANGE: &str = "1..=4294967295";

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FrameCount { got } => write!(f, "{got} frames, expected 2 or 3"),
            Self::SequenceLength { got } => write!(f, "sequence frame of {got} bytes, not 8"),
            Self::TopicNotUtf8 => f.write_str("topic frame is not UTF-8"),
            Self::EmptyPayload { seq } => write!(f, "empty payload at sequence {seq}"),
            Self::EndMarkerWithPayload { len } => {
                write!(f, "end-marker sequence with a {len}-byte payload")
            }
            Self::Malformed { detail } => write!(f, "malformed payload: {detail}"),
            Self::TrailingBytes { len } => write!(f, "{len} bytes after the payload's value"),
            Self::UnexpectedTag { tag } => write!(f, "unexpected record tag {tag:?}"),
            Self::TooFewFields { record, got, min } => {
                write!(f, "{record}: {got} elements, at least {min} expected")
            }
            Self::TooManyFields { record, got, max } => {
                write!(f, "{record}: {got} elements, at most {max} expected")
            }
            Self::MissingField { record, field } => write!(f, "{record}: missing {field}"),
            Self::HashSize { len } => write!(f, "binary block hash of {len} bytes, not 32"),
            Self::OutOfRange {
                field,
                value,
                valid,
            } => write!(f, "{field} = {value} is out of range {valid}"),
            Self::NonFiniteTimestamp { bits } => {
                write!(f, "batch ts = {} is not finite", f64::from_bits(*bits))
            }
            Self::TokenCount {
                blocks,
                block_size,
                tokens,
            } => write!(
                f,
                "{tokens} token ids for {blocks} blocks of {block_size} tokens"
            ),
            Self::Prometheus { line, detail } => write!(f, "metrics line {line}: {detail}"),
            Self::MissingMetric { dp_rank, metric } => {
                write!(f, "rank {dp_rank}: {metric} not reported")
            }
            Self::ConflictingSamples { dp_rank, metric } => {
                write!(f, "rank {dp_rank}: {metric} reported with different values")
            }
            Self::DuplicateRank { dp_rank } => write!(f, "rank {dp_rank} listed twice"),
            Self::NoRanks => f.write_str("load document reports no rank"),
        }
    }
}

impl std::error::Error for WireError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_in_counter_order() {
        for (i, k) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
    }

    #[test]
    fn kind_names_are_snake_case_and_distinct() {
        assert_eq!(ErrorKind::TopicNotUtf8.name(), "topic_not_utf8");
        assert_eq!(ErrorKind::NonFiniteTimestamp.name(), "non_finite_timestamp");
        assert_eq!(ErrorKind::NoRanks.to_string(), "no_ranks");
        let mut names: Vec<_> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorKind::COUNT);
    }
}
