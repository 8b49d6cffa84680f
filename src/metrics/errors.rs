//! The error codes inside each response, as Kafka's `AbstractResponse.errorCounts()` sees
//! them: top-level codes plus every per-topic, per-partition, per-group or per-member code.

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

/// Every error code a response carries (0 included; the caller skips it).
pub trait ErrorCodes {
    fn error_codes(&self, f: &mut dyn FnMut(i16));
}

/// Kafka's name for an error code (`UNKNOWN_TOPIC_OR_PARTITION`), as its `Errors` enum and
/// JMX `error` tag spell it.
pub fn name(code: i16) -> String {
    // Codes this crate does not know come back as `Unknown(code)`.
    match ResponseError::try_from_code(code).map(|e| format!("{e:?}")) {
        Some(camel) if !camel.contains('(') => {
            let mut out = String::with_capacity(camel.len() + 8);
            for (i, c) in camel.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(c.to_ascii_uppercase());
            }
            out
        }
        _ => format!("UNKNOWN_CODE_{code}"),
    }
}

macro_rules! codes {
    ($t:ty, |$r:ident, $f:ident| $body:block) => {
        impl ErrorCodes for $t {
            fn error_codes(&self, $f: &mut dyn FnMut(i16)) {
                let $r = self;
                $body
            }
        }
    };
}

codes!(ProduceResponse, |r, f| {
    r.responses
        .iter()
        .flat_map(|t| &t.partition_responses)
        .for_each(|p| f(p.error_code));
});
codes!(FetchResponse, |r, f| {
    f(r.error_code);
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(ListOffsetsResponse, |r, f| {
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(MetadataResponse, |r, f| {
    f(r.error_code);
    for t in &r.topics {
        f(t.error_code);
        t.partitions.iter().for_each(|p| f(p.error_code));
    }
});
codes!(OffsetCommitResponse, |r, f| {
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(OffsetFetchResponse, |r, f| {
    f(r.error_code);
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
    for g in &r.groups {
        f(g.error_code);
        g.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code));
    }
});
codes!(FindCoordinatorResponse, |r, f| {
    f(r.error_code);
    r.coordinators.iter().for_each(|c| f(c.error_code));
});
codes!(JoinGroupResponse, |r, f| { f(r.error_code) });
codes!(HeartbeatResponse, |r, f| { f(r.error_code) });
codes!(LeaveGroupResponse, |r, f| {
    f(r.error_code);
    r.members.iter().for_each(|m| f(m.error_code));
});
codes!(SyncGroupResponse, |r, f| { f(r.error_code) });
codes!(DescribeGroupsResponse, |r, f| {
    r.groups.iter().for_each(|g| f(g.error_code));
});
codes!(ListGroupsResponse, |r, f| { f(r.error_code) });
codes!(ApiVersionsResponse, |r, f| { f(r.error_code) });
codes!(CreateTopicsResponse, |r, f| {
    r.topics.iter().for_each(|t| f(t.error_code));
});
codes!(DeleteTopicsResponse, |r, f| {
    r.responses.iter().for_each(|t| f(t.error_code));
});
codes!(DeleteRecordsResponse, |r, f| {
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(InitProducerIdResponse, |r, f| { f(r.error_code) });
codes!(AddPartitionsToTxnResponse, |r, f| {
    f(r.error_code);
    r.results_by_topic_v3_and_below
        .iter()
        .chain(
            r.results_by_transaction
                .iter()
                .flat_map(|t| &t.topic_results),
        )
        .flat_map(|t| &t.results_by_partition)
        .for_each(|p| f(p.partition_error_code));
});
codes!(AddOffsetsToTxnResponse, |r, f| { f(r.error_code) });
codes!(EndTxnResponse, |r, f| { f(r.error_code) });
codes!(WriteTxnMarkersResponse, |r, f| {
    r.markers
        .iter()
        .flat_map(|m| &m.topics)
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(TxnOffsetCommitResponse, |r, f| {
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(DescribeProducersResponse, |r, f| {
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(DescribeTransactionsResponse, |r, f| {
    r.transaction_states.iter().for_each(|s| f(s.error_code));
});
codes!(ListTransactionsResponse, |r, f| { f(r.error_code) });
codes!(OffsetForLeaderEpochResponse, |r, f| {
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(DescribeConfigsResponse, |r, f| {
    r.results.iter().for_each(|c| f(c.error_code));
});
codes!(AlterConfigsResponse, |r, f| {
    r.responses.iter().for_each(|c| f(c.error_code));
});
codes!(DescribeLogDirsResponse, |r, f| {
    f(r.error_code);
    r.results.iter().for_each(|d| f(d.error_code));
});
codes!(CreatePartitionsResponse, |r, f| {
    r.results.iter().for_each(|t| f(t.error_code));
});
codes!(DeleteGroupsResponse, |r, f| {
    r.results.iter().for_each(|g| f(g.error_code));
});
codes!(IncrementalAlterConfigsResponse, |r, f| {
    r.responses.iter().for_each(|c| f(c.error_code));
});
codes!(OffsetDeleteResponse, |r, f| {
    f(r.error_code);
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(DescribeClusterResponse, |r, f| { f(r.error_code) });
codes!(DescribeClientQuotasResponse, |r, f| { f(r.error_code) });
codes!(AlterClientQuotasResponse, |r, f| {
    r.entries.iter().for_each(|e| f(e.error_code));
});
codes!(SaslHandshakeResponse, |r, f| { f(r.error_code) });
codes!(SaslAuthenticateResponse, |r, f| { f(r.error_code) });
codes!(DescribeUserScramCredentialsResponse, |r, f| {
    f(r.error_code);
    r.results.iter().for_each(|u| f(u.error_code));
});
codes!(AlterUserScramCredentialsResponse, |r, f| {
    r.results.iter().for_each(|u| f(u.error_code));
});
codes!(CreateAclsResponse, |r, f| {
    r.results.iter().for_each(|c| f(c.error_code));
});
codes!(DescribeAclsResponse, |r, f| { f(r.error_code) });
codes!(DeleteAclsResponse, |r, f| {
    r.filter_results.iter().for_each(|c| f(c.error_code));
});
codes!(UpdateFeaturesResponse, |r, f| { f(r.error_code) });
codes!(ConsumerGroupHeartbeatResponse, |r, f| { f(r.error_code) });
codes!(ShareGroupHeartbeatResponse, |r, f| { f(r.error_code) });
codes!(ShareGroupDescribeResponse, |r, f| {
    r.groups.iter().for_each(|g| f(g.error_code));
});
codes!(ShareFetchResponse, |r, f| {
    f(r.error_code);
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| {
            f(p.error_code);
            f(p.acknowledge_error_code);
        });
});
codes!(DescribeShareGroupOffsetsResponse, |r, f| {
    for g in &r.groups {
        f(g.error_code);
        g.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| f(p.error_code));
    }
});
codes!(AlterShareGroupOffsetsResponse, |r, f| {
    f(r.error_code);
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(DeleteShareGroupOffsetsResponse, |r, f| {
    f(r.error_code);
    r.responses.iter().for_each(|t| f(t.error_code));
});
codes!(ShareAcknowledgeResponse, |r, f| {
    f(r.error_code);
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(crate::wire::newer::ShareFetchReply, |r, f| {
    r.0.error_codes(f)
});
codes!(crate::wire::newer::ShareAcknowledgeReply, |r, f| {
    r.response.error_codes(f)
});
codes!(crate::wire::newer::ShareGroupOffsetsReply, |r, f| {
    r.response.error_codes(f)
});
codes!(crate::wire::newer::ShareStateSummaryReply, |r, f| {
    r.response.error_codes(f)
});
codes!(InitializeShareGroupStateResponse, |r, f| {
    r.results
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(ReadShareGroupStateResponse, |r, f| {
    r.results
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(WriteShareGroupStateResponse, |r, f| {
    r.results
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(DeleteShareGroupStateResponse, |r, f| {
    r.results
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(ReadShareGroupStateSummaryResponse, |r, f| {
    r.results
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(ConsumerGroupDescribeResponse, |r, f| {
    r.groups.iter().for_each(|g| f(g.error_code));
});
codes!(DescribeTopicPartitionsResponse, |r, f| {
    for t in &r.topics {
        f(t.error_code);
        t.partitions.iter().for_each(|p| f(p.error_code));
    }
});
codes!(ListConfigResourcesResponse, |r, f| { f(r.error_code) });
codes!(ElectLeadersResponse, |r, f| {
    f(r.error_code);
    r.replica_election_results
        .iter()
        .flat_map(|t| &t.partition_result)
        .for_each(|p| f(p.error_code));
});
codes!(AlterPartitionReassignmentsResponse, |r, f| {
    f(r.error_code);
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(DescribeQuorumResponse, |r, f| {
    f(r.error_code);
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| f(p.error_code));
});
codes!(ListPartitionReassignmentsResponse, |r, f| {
    f(r.error_code)
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kafka() {
        assert_eq!(name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(name(6), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(name(27), "REBALANCE_IN_PROGRESS");
        assert_eq!(name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(name(9999), "UNKNOWN_CODE_9999");
    }

    #[test]
    fn nested_codes_are_all_seen() {
        use kafka_protocol::messages::produce_response::*;
        let r = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
            .with_partition_responses(vec![
                PartitionProduceResponse::default().with_error_code(2),
                PartitionProduceResponse::default(),
            ])]);
        let mut seen = Vec::new();
        r.error_codes(&mut |c| seen.push(c));
        assert_eq!(seen, vec![2, 0]);
    }
}
