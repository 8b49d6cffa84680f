//! Cairn's errors and the one mapping from them to Kafka wire error codes.
//!
//! Handlers and the log return [`Error`]; [`Error::code`] is the only place that decides
//! which Kafka error code a client sees. Storage failures are [`Error::Storage`] and reach
//! clients as KAFKA_STORAGE_ERROR, never as a dropped broker.

use kafka_protocol::ResponseError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("unknown topic id")]
    UnknownTopicId,
    #[error("topic already exists: {0}")]
    TopicAlreadyExists(String),
    #[error("invalid topic: {0}")]
    InvalidTopic(String),
    #[error("invalid number of partitions: {0}")]
    InvalidPartitions(String),
    #[error("invalid replication factor: {0}")]
    InvalidReplicationFactor(String),
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("{0}")]
    PolicyViolation(String),
    /// KIP-599: the client's `controller_mutation_rate` is used up for now.
    #[error("The throttling quota has been exceeded.")]
    ThrottlingQuotaExceeded,
    #[error("topic deletion is disabled (delete.topic.enable=false)")]
    TopicDeletionDisabled,
    #[error("corrupt record batch: {0}")]
    CorruptMessage(String),
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Records a compacted topic refuses for want of a key: their indexes in the batch,
    /// which Produce (v8+) lists as record errors.
    #[error("Compacted topic cannot accept message without key in topic partition {partition}.")]
    KeylessRecords {
        partition: String,
        indexes: Vec<i32>,
    },
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: i32 },
    #[error("offset {offset} is out of range [{start}, {end}]")]
    OffsetOutOfRange { offset: i64, start: i64, end: i64 },
    #[error("out of order sequence: expected {expected}, got {got}")]
    OutOfOrderSequence { expected: i32, got: i32 },
    #[error("producer epoch {got} is older than the current epoch {current}")]
    InvalidProducerEpoch { got: i16, current: i16 },
    #[error(
        "coordinator epoch {got} is older than the partition's last coordinator epoch {current}"
    )]
    TransactionCoordinatorFenced { got: i32, current: i32 },
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// What the transaction coordinator answered, as the leader passes it on.
    #[error("transaction check failed: {0:?}")]
    Transaction(ResponseError),
    #[error("leader epoch {got} is older than the current leader epoch {current}")]
    FencedLeaderEpoch { got: i32, current: i32 },
    #[error("leader epoch {got} is newer than the current leader epoch {current}")]
    UnknownLeaderEpoch { got: i32, current: i32 },
    #[error(
        "the high watermark {hw} lags the start of this leader's epoch at {epoch_start}: retry"
    )]
    OffsetNotAvailable { hw: i64, epoch_start: i64 },
    #[error("in-sync replicas {isr} are fewer than min.insync.replicas {min}")]
    NotEnoughReplicas { isr: usize, min: i32 },
    #[error("compression type {0} is not supported")]
    UnsupportedCompressionType(u8),
    #[error("fetch session {0} not found")]
    FetchSessionIdNotFound(i32),
    #[error("this broker is not the leader of the partition")]
    NotLeaderOrFollower,
    #[error("in-sync replicas {isr} fell below min.insync.replicas {min} after the append")]
    NotEnoughReplicasAfterAppend { isr: usize, min: i32 },
    #[error("the in-sync replicas did not acknowledge within the request timeout")]
    RequestTimedOut,
    #[error("the controller quorum did not answer in time")]
    ControllerUnavailable,
    /// An error the active controller answered with.
    #[error("{message}")]
    Controller {
        error: ResponseError,
        message: String,
    },
    #[error("storage error: {0}")]
    Storage(String),
    /// The authorizer refused: TOPIC_, GROUP_, CLUSTER_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    #[error("not authorized: {0:?}")]
    Authorization(ResponseError),
}

impl Error {
    /// The Kafka error a client sees for this error.
    pub fn response_error(&self) -> ResponseError {
        match self {
            Error::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
            Error::UnknownTopicId => ResponseError::UnknownTopicId,
            Error::TopicAlreadyExists(_) => ResponseError::TopicAlreadyExists,
            Error::InvalidTopic(_) => ResponseError::InvalidTopicException,
            Error::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            Error::PolicyViolation(_) => ResponseError::PolicyViolation,
            Error::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            Error::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            Error::InvalidConfig(_) => ResponseError::InvalidConfig,
            Error::InvalidRequest(_) => ResponseError::InvalidRequest,
            Error::ThrottlingQuotaExceeded => ResponseError::ThrottlingQuotaExceeded,
            Error::TopicDeletionDisabled => ResponseError::TopicDeletionDisabled,
            Error::CorruptMessage(_) => ResponseError::CorruptMessage,
            Error::InvalidRecord(_) | Error::KeylessRecords { .. } => ResponseError::InvalidRecord,
            Error::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            Error::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            Error::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
            Error::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
            Error::TransactionCoordinatorFenced { .. } => {
                ResponseError::TransactionCoordinatorFenced
            }
            Error::InvalidTxnState(_) => ResponseError::InvalidTxnState,
            Error::Transaction(e) => *e,
            Error::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
            Error::UnknownLeaderEpoch { .. } => ResponseError::UnknownLeaderEpoch,
            Error::OffsetNotAvailable { .. } => ResponseError::OffsetNotAvailable,
            Error::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas,
            Error::UnsupportedCompressionType(_) => ResponseError::UnsupportedCompressionType,
            Error::FetchSessionIdNotFound(_) => ResponseError::FetchSessionIdNotFound,
            Error::NotLeaderOrFollower => ResponseError::NotLeaderOrFollower,
            Error::NotEnoughReplicasAfterAppend { .. } => {
                ResponseError::NotEnoughReplicasAfterAppend
            }
            Error::RequestTimedOut => ResponseError::RequestTimedOut,
            Error::ControllerUnavailable => ResponseError::RequestTimedOut,
            Error::Controller { error, .. } => *error,
            Error::Storage(_) => ResponseError::KafkaStorageError,
            Error::Authorization(e) => *e,
        }
    }

    /// The wire code for this error.
    pub fn code(&self) -> i16 {
        self.response_error().code()
    }

    /// A message worth sending to the client in responses that carry one.
    pub fn message(&self) -> Option<kafka_protocol::protocol::StrBytes> {
        Some(kafka_protocol::protocol::StrBytes::from_string(
            self.to_string(),
        ))
    }
}
