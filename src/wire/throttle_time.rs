//! A response's `throttle_time_ms`, for the quotas measured after a handler has built it
//! (`request_percentage`). Responses without the field are the ones brokers send one
//! another (Kafka's cluster actions: WriteTxnMarkers, the share state RPCs,
//! DescribeQuorum) and SASL's, which no request quota applies to.

use kafka_protocol::messages::*;

use super::newer::{
    LaidOutAs, ShareAcknowledgeReply, ShareGroupOffsetsReply, ShareStateSummaryReply,
};

pub trait ThrottleTime {
    /// Whether the response type has the field.
    const CARRIED: bool;

    /// The response's `throttle_time_ms`, `None` for a response that has none.
    fn throttle_time_ms(&mut self) -> Option<&mut i32>;

    /// Raises the response's throttle to `ms` if it is below (a byte-rate or mutation
    /// throttle may already be there: the longest is sent, as Kafka sends it).
    fn raise_throttle_time(&mut self, ms: u64) {
        if let Some(t) = self.throttle_time_ms() {
            *t = (*t).max(ms.min(i32::MAX as u64) as i32);
        }
    }
}

/// A response that may not be sent (acks=0 produce).
impl<T: ThrottleTime> ThrottleTime for Option<T> {
    const CARRIED: bool = T::CARRIED;

    fn throttle_time_ms(&mut self) -> Option<&mut i32> {
        self.as_mut().and_then(T::throttle_time_ms)
    }
}

/// A response written in an older version's layout.
impl<M: ThrottleTime, const OLD: i16> ThrottleTime for LaidOutAs<M, OLD> {
    const CARRIED: bool = M::CARRIED;

    fn throttle_time_ms(&mut self) -> Option<&mut i32> {
        self.0.throttle_time_ms()
    }
}

/// The answers `newer` adds fields to, with their response inside.
macro_rules! within {
    ($($t:ty => $inner:ty),* $(,)?) => {
        $(impl ThrottleTime for $t {
            const CARRIED: bool = <$inner>::CARRIED;

            fn throttle_time_ms(&mut self) -> Option<&mut i32> {
                self.response.throttle_time_ms()
            }
        })*
    };
}

within!(
    ShareAcknowledgeReply => ShareAcknowledgeResponse,
    ShareGroupOffsetsReply => DescribeShareGroupOffsetsResponse,
    ShareStateSummaryReply => ReadShareGroupStateSummaryResponse,
);

macro_rules! with_field {
    ($($t:ty),* $(,)?) => {
        $(impl ThrottleTime for $t {
            const CARRIED: bool = true;

            fn throttle_time_ms(&mut self) -> Option<&mut i32> {
                Some(&mut self.throttle_time_ms)
            }
        })*
    };
}

macro_rules! without_field {
    ($($t:ty),* $(,)?) => {
        $(impl ThrottleTime for $t {
            const CARRIED: bool = false;

            fn throttle_time_ms(&mut self) -> Option<&mut i32> {
                None
            }
        })*
    };
}

with_field!(
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    AlterShareGroupOffsetsResponse,
    AlterUserScramCredentialsResponse,
    ApiVersionsResponse,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    CreateAclsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DeleteShareGroupOffsetsResponse,
    DeleteTopicsResponse,
    DescribeAclsResponse,
    DescribeClientQuotasResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    DescribeLogDirsResponse,
    DescribeProducersResponse,
    DescribeShareGroupOffsetsResponse,
    DescribeTopicPartitionsResponse,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsResponse,
    ElectLeadersResponse,
    EndTxnResponse,
    FetchResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    IncrementalAlterConfigsResponse,
    InitProducerIdResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListConfigResourcesResponse,
    ListGroupsResponse,
    ListOffsetsResponse,
    ListPartitionReassignmentsResponse,
    ListTransactionsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    OffsetForLeaderEpochResponse,
    ProduceResponse,
    ShareAcknowledgeResponse,
    ShareFetchResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
    UpdateFeaturesResponse,
);

without_field!(
    DeleteShareGroupStateResponse,
    DescribeQuorumResponse,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
    WriteShareGroupStateResponse,
    WriteTxnMarkersResponse,
);
