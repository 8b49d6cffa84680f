//! Versions newer than kafka-protocol 0.18 knows, for the messages that need them: each adds
//! fixed-size fields to a message the crate decodes and encodes at the version before. A
//! [`Piece`] layout of the older version says where the new fields sit; a message is read
//! by cutting them out of the body and decoding the rest at the older version, and written
//! at the older version with them put in.
//!
//! - ShareFetch v2 (KIP-1206, KIP-1222): `ShareAcquireMode` int8 and `IsRenewAck` bool after
//!   `BatchSize`. The response is the same as v1 ([`ShareFetchReply`]).
//! - ShareAcknowledge v2 (KIP-1222): `IsRenewAck` bool after `ShareSessionEpoch`; the response
//!   adds `AcquisitionLockTimeoutMs` int32 after `ErrorMessage`.
//! - DescribeShareGroupOffsets v1 (KIP-1226): the request is v0's; each response partition
//!   adds `Lag` int64 after `LeaderEpoch`.
//! - ReadShareGroupStateSummary v1 (KIP-1226): the request is v0's; each response partition
//!   adds `DeliveryCompleteCount` int32 after `StartOffset`.
//!
//! Both directions are here (the integration tests speak the new versions as clients, and
//! brokers ask each other for state summaries). The field layouts are those of Kafka 4.4's
//! JSON schemas of these messages.

use std::collections::HashMap;

use anyhow::{anyhow, Result};
use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{
    ApiKey, DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse,
    ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse, ShareAcknowledgeRequest,
    ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use kafka_protocol::protocol::buf::{ByteBuf, ByteBufMut};
use kafka_protocol::protocol::{Decodable, Encodable};
use uuid::Uuid;

/// The APIs this module extends, with the newest version it reads and writes.
pub const VERSIONS: &[(ApiKey, i16)] = &[
    (ApiKey::ShareFetch, 2),
    (ApiKey::ShareAcknowledge, 2),
    (ApiKey::DescribeShareGroupOffsets, 1),
    (ApiKey::ReadShareGroupStateSummary, 1),
];

/// ShareFetch's acquire mode (KIP-1206, the client's `share.acquire.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AcquireMode {
    /// Whole batches, until at least MaxRecords records are acquired.
    #[default]
    BatchOptimized = 0,
    /// At most MaxRecords records, splitting batches.
    RecordLimit = 1,
}

/// A message whose newer versions are laid out as version `OLD`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaidOutAs<M, const OLD: i16>(pub M);

/// A ShareFetch request of any version Cairn serves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareFetch {
    pub request: ShareFetchRequest,
    pub acquire_mode: AcquireMode,
    /// The acknowledgements renew locks; nothing is fetched.
    pub renew_ack: bool,
}

/// A ShareFetch response of any version Cairn serves.
pub type ShareFetchReply = LaidOutAs<ShareFetchResponse, 1>;

/// A ShareAcknowledge request of any version Cairn serves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareAcknowledge {
    pub request: ShareAcknowledgeRequest,
    pub renew_ack: bool,
}

/// A ShareAcknowledge response of any version Cairn serves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareAcknowledgeReply {
    pub response: ShareAcknowledgeResponse,
    /// v2+: the group's record lock duration.
    pub acquisition_lock_timeout_ms: i32,
}

/// A DescribeShareGroupOffsets request of any version Cairn serves.
pub type ShareGroupOffsets = LaidOutAs<DescribeShareGroupOffsetsRequest, 0>;

/// A (group, topic id, partition) a share-group answer names.
pub type GroupPartition = (String, Uuid, i32);

/// A DescribeShareGroupOffsets response of any version Cairn serves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareGroupOffsetsReply {
    pub response: DescribeShareGroupOffsetsResponse,
    /// v1+: each partition's lag; a partition without one is sent as -1 (unknown).
    pub lags: HashMap<GroupPartition, i64>,
}

/// A ReadShareGroupStateSummary request of any version Cairn serves.
pub type ShareStateSummary = LaidOutAs<ReadShareGroupStateSummaryRequest, 0>;

/// A ReadShareGroupStateSummary response of any version Cairn serves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareStateSummaryReply {
    pub response: ReadShareGroupStateSummaryResponse,
    /// v1+: each partition's records at or past the start offset whose delivery is complete
    /// (acknowledged or archived); a partition without one is sent as -1 (unknown).
    pub delivery_complete: HashMap<(Uuid, i32), i32>,
}

/// One piece of a message's layout at its older version, as far as the new fields.
#[derive(Debug, Clone, Copy)]
enum Piece {
    /// Fixed-size fields of so many bytes.
    Fixed(usize),
    /// A compact (nullable) string.
    Str,
    /// A compact array whose elements are laid out so.
    Array(&'static [Piece]),
    /// Tagged fields.
    Tags,
    /// A field of so many bytes the newer version adds here.
    New(usize),
}

use Piece::{Array, Fixed, New, Str, Tags};

/// ShareFetch v2: after GroupId, MemberId and six int32s.
const SHARE_FETCH_V2: &[Piece] = &[Str, Str, Fixed(24), New(2)];
/// ShareAcknowledge v2's request: after GroupId, MemberId and the epoch.
const SHARE_ACKNOWLEDGE_V2: &[Piece] = &[Str, Str, Fixed(4), New(1)];
/// ShareAcknowledge v2's response: after ThrottleTimeMs, ErrorCode and ErrorMessage.
const SHARE_ACKNOWLEDGE_REPLY_V2: &[Piece] = &[Fixed(6), Str, New(4)];
/// DescribeShareGroupOffsets v1's response: groups, topics, partitions (index, start
/// offset, leader epoch, then the lag).
const SHARE_GROUP_OFFSETS_REPLY_V1: &[Piece] = &[
    Fixed(4),
    Array(&[
        Str,
        Array(&[
            Str,
            Fixed(16),
            Array(&[Fixed(16), New(8), Fixed(2), Str, Tags]),
            Tags,
        ]),
        Fixed(2),
        Str,
        Tags,
    ]),
    Tags,
];
/// ReadShareGroupStateSummary v1's response: results, partitions (partition, error, message,
/// state epoch, leader epoch, start offset, then the count).
const SHARE_STATE_SUMMARY_REPLY_V1: &[Piece] = &[
    Array(&[
        Fixed(16),
        Array(&[Fixed(6), Str, Fixed(16), New(4), Tags]),
        Tags,
    ]),
    Tags,
];

impl<M: Decodable, const OLD: i16> Decodable for LaidOutAs<M, OLD> {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(LaidOutAs(M::decode(buf, version.min(OLD))?))
    }
}

impl<M: Encodable, const OLD: i16> Encodable for LaidOutAs<M, OLD> {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {
        self.0.encode(buf, version.min(OLD))
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        self.0.compute_size(version.min(OLD))
    }
}

impl Decodable for ShareFetch {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        if version < 2 {
            return Ok(ShareFetch {
                request: ShareFetchRequest::decode(buf, version)?,
                ..Default::default()
            });
        }
        let (request, fields) = decode_without(buf, 1, SHARE_FETCH_V2)?;
        let acquire_mode = match fields[0] {
            0 => AcquireMode::BatchOptimized,
            1 => AcquireMode::RecordLimit,
            m => return Err(anyhow!("unknown ShareAcquireMode {m}")),
        };
        Ok(ShareFetch {
            request,
            acquire_mode,
            renew_ack: fields[1] != 0,
        })
    }
}

impl Decodable for ShareAcknowledge {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        if version < 2 {
            return Ok(ShareAcknowledge {
                request: ShareAcknowledgeRequest::decode(buf, version)?,
                renew_ack: false,
            });
        }
        let (request, fields) = decode_without(buf, 1, SHARE_ACKNOWLEDGE_V2)?;
        Ok(ShareAcknowledge {
            request,
            renew_ack: fields[0] != 0,
        })
    }
}

impl Encodable for ShareFetch {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {
        if version < 2 {
            if self.renew_ack || self.acquire_mode != AcquireMode::BatchOptimized {
                return Err(anyhow!(
                    "ShareFetch v{version} has no IsRenewAck or ShareAcquireMode"
                ));
            }
            return self.request.encode(buf, version);
        }
        let fields = [self.acquire_mode as u8, self.renew_ack as u8];
        encode_with(&self.request, 1, SHARE_FETCH_V2, &fields, buf)
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        let v1 = self.request.compute_size(version.min(1))?;
        Ok(if version >= 2 { v1 + 2 } else { v1 })
    }
}

impl Encodable for ShareAcknowledge {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {
        if version < 2 {
            if self.renew_ack {
                return Err(anyhow!("ShareAcknowledge v{version} has no IsRenewAck"));
            }
            return self.request.encode(buf, version);
        }
        let field = [self.renew_ack as u8];
        encode_with(&self.request, 1, SHARE_ACKNOWLEDGE_V2, &field, buf)
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        let v1 = self.request.compute_size(version.min(1))?;
        Ok(if version >= 2 { v1 + 1 } else { v1 })
    }
}

impl Decodable for ShareAcknowledgeReply {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        if version < 2 {
            return Ok(ShareAcknowledgeReply {
                response: ShareAcknowledgeResponse::decode(buf, version)?,
                acquisition_lock_timeout_ms: 0,
            });
        }
        let (response, fields) = decode_without(buf, 1, SHARE_ACKNOWLEDGE_REPLY_V2)?;
        Ok(ShareAcknowledgeReply {
            response,
            acquisition_lock_timeout_ms: i32::from_be_bytes(fields[..4].try_into()?),
        })
    }
}

impl Encodable for ShareAcknowledgeReply {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {
        if version < 2 {
            return self.response.encode(buf, version);
        }
        let timeout = self.acquisition_lock_timeout_ms.to_be_bytes();
        encode_with(&self.response, 1, SHARE_ACKNOWLEDGE_REPLY_V2, &timeout, buf)
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        let v1 = self.response.compute_size(version.min(1))?;
        Ok(if version >= 2 { v1 + 4 } else { v1 })
    }
}

impl ShareGroupOffsetsReply {
    /// Every partition of the response, in wire order.
    fn partitions(&self) -> impl Iterator<Item = GroupPartition> + '_ {
        self.response.groups.iter().flat_map(|g| {
            g.topics.iter().flat_map(move |t| {
                t.partitions
                    .iter()
                    .map(move |p| (g.group_id.to_string(), t.topic_id, p.partition_index))
            })
        })
    }
}

impl Decodable for ShareGroupOffsetsReply {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        if version < 1 {
            return Ok(ShareGroupOffsetsReply {
                response: DescribeShareGroupOffsetsResponse::decode(buf, version)?,
                lags: HashMap::new(),
            });
        }
        let (response, fields) = decode_without(buf, 0, SHARE_GROUP_OFFSETS_REPLY_V1)?;
        let mut reply = ShareGroupOffsetsReply {
            response,
            lags: HashMap::new(),
        };
        let lags = fields
            .chunks_exact(8)
            .map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")));
        reply.lags = reply.partitions().zip(lags).collect();
        Ok(reply)
    }
}

impl Encodable for ShareGroupOffsetsReply {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {
        if version < 1 {
            return self.response.encode(buf, version);
        }
        let lags: Vec<u8> = self
            .partitions()
            .flat_map(|k| self.lags.get(&k).copied().unwrap_or(-1).to_be_bytes())
            .collect();
        encode_with(&self.response, 0, SHARE_GROUP_OFFSETS_REPLY_V1, &lags, buf)
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        let v0 = self.response.compute_size(0)?;
        Ok(match version {
            0 => v0,
            _ => v0 + 8 * self.partitions().count(),
        })
    }
}

impl ShareStateSummaryReply {
    /// Every partition of the response, in wire order.
    fn partitions(&self) -> impl Iterator<Item = (Uuid, i32)> + '_ {
        self.response
            .results
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, p.partition)))
    }
}

impl Decodable for ShareStateSummaryReply {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        if version < 1 {
            return Ok(ShareStateSummaryReply {
                response: ReadShareGroupStateSummaryResponse::decode(buf, version)?,
                delivery_complete: HashMap::new(),
            });
        }
        let (response, fields) = decode_without(buf, 0, SHARE_STATE_SUMMARY_REPLY_V1)?;
        let mut reply = ShareStateSummaryReply {
            response,
            delivery_complete: HashMap::new(),
        };
        let counts = fields
            .chunks_exact(4)
            .map(|b| i32::from_be_bytes(b.try_into().expect("4 bytes")));
        reply.delivery_complete = reply.partitions().zip(counts).collect();
        Ok(reply)
    }
}

impl Encodable for ShareStateSummaryReply {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {
        if version < 1 {
            return self.response.encode(buf, version);
        }
        let counts: Vec<u8> = self
            .partitions()
            .flat_map(|k| {
                let n = self.delivery_complete.get(&k).copied().unwrap_or(-1);
                n.to_be_bytes()
            })
            .collect();
        encode_with(
            &self.response,
            0,
            SHARE_STATE_SUMMARY_REPLY_V1,
            &counts,
            buf,
        )
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        let v0 = self.response.compute_size(0)?;
        Ok(match version {
            0 => v0,
            _ => v0 + 4 * self.partitions().count(),
        })
    }
}

/// `message` encoded at `old`, with `fields` put in at the `New` pieces of `layout` (each
/// taking its size from the front of `fields`, in wire order).
fn encode_with<M: Encodable, B: ByteBufMut>(
    message: &M,
    old: i16,
    layout: &[Piece],
    fields: &[u8],
    buf: &mut B,
) -> Result<()> {
    let mut body = BytesMut::with_capacity(message.compute_size(old)?);
    message.encode(&mut body, old)?;
    let places = new_fields(layout, &body, false)?;
    if places.iter().map(|(_, n)| n).sum::<usize>() != fields.len() {
        return Err(anyhow!(
            "{} bytes of new fields for {places:?}",
            fields.len()
        ));
    }
    let (mut from, mut taken) = (0, 0);
    for (at, n) in places {
        buf.put_slice(&body[from..at]);
        buf.put_slice(&fields[taken..taken + n]);
        (from, taken) = (at, taken + n);
    }
    buf.put_slice(&body[from..]);
    Ok(())
}

/// The message in `buf`, laid out as version `old` with the `New` pieces of `layout` in it:
/// decoded at `old` without them, and their bytes in wire order.
fn decode_without<M: Decodable, B: ByteBuf>(
    buf: &mut B,
    old: i16,
    layout: &[Piece],
) -> Result<(M, Vec<u8>)> {
    let n = buf.remaining();
    let body = buf.get_bytes(n);
    let places = new_fields(layout, &body, true)?;
    let mut fields = Vec::new();
    let mut rest = BytesMut::with_capacity(body.len());
    let mut from = 0;
    for (at, n) in places {
        rest.put_slice(&body[from..at]);
        fields.extend_from_slice(&body[at..at + n]);
        from = at + n;
    }
    rest.put_slice(&body[from..]);
    let message = M::decode(&mut rest.freeze(), old)?;
    Ok((message, fields))
}

/// Where each `New` piece of `layout` sits in `body` (position, size), in wire order. With
/// `present`, `body` has them (the newer version), else not (the older).
fn new_fields(layout: &[Piece], body: &[u8], present: bool) -> Result<Vec<(usize, usize)>> {
    let mut places = Vec::new();
    let mut at = 0;
    walk(layout, body, &mut at, present, &mut places)
        .ok_or_else(|| anyhow!("message too short for its layout ({} bytes)", body.len()))?;
    Ok(places)
}

fn walk(
    layout: &[Piece],
    b: &[u8],
    at: &mut usize,
    present: bool,
    places: &mut Vec<(usize, usize)>,
) -> Option<()> {
    for piece in layout {
        match *piece {
            Fixed(n) => *at += n,
            Str => *at = skip_compact_string(b, *at)?,
            Array(element) => {
                let (n, next) = unsigned_varint(b, *at)?;
                *at = next;
                // Length + 1, 0 for null; every element takes at least a byte.
                let n = n.saturating_sub(1);
                if n > (b.len() - *at) as u64 {
                    return None;
                }
                for _ in 0..n {
                    walk(element, b, at, present, places)?;
                }
            }
            Tags => {
                let (n, mut next) = unsigned_varint(b, *at)?;
                for _ in 0..n {
                    let (_tag, after) = unsigned_varint(b, next)?;
                    let (size, after) = unsigned_varint(b, after)?;
                    next = after.checked_add(size as usize)?;
                    if next > b.len() {
                        return None;
                    }
                }
                *at = next;
            }
            New(n) => {
                places.push((*at, n));
                if present {
                    *at += n;
                }
            }
        }
        if *at > b.len() {
            return None;
        }
    }
    Some(())
}

/// The position after the compact nullable string at `at`.
fn skip_compact_string(b: &[u8], at: usize) -> Option<usize> {
    let (n, at) = unsigned_varint(b, at)?;
    let end = at.checked_add(n.saturating_sub(1) as usize)?;
    (end <= b.len()).then_some(end)
}

/// The unsigned varint at `at` and the position after it.
fn unsigned_varint(b: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for shift in (0..35).step_by(7) {
        let byte = *b.get(at)?;
        at += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some((v, at));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::share_acknowledge_request::{
        AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch,
    };
    use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::GroupId;
    use kafka_protocol::protocol::StrBytes;

    fn fetch_v1() -> ShareFetchRequest {
        ShareFetchRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_static_str("g"))))
            .with_member_id(Some(StrBytes::from_static_str("member-1")))
            .with_share_session_epoch(3)
            .with_max_wait_ms(500)
            .with_max_records(7)
            .with_batch_size(7)
            .with_topics(vec![FetchTopic::default()
                .with_topic_id(uuid::Uuid::from_u128(9))
                .with_partitions(vec![
                    FetchPartition::default().with_partition_index(2)
                ])])
    }

    /// A v2 body as Kafka 4.4 writes it: v1's with the two new fields after BatchSize.
    fn v2_body(v1: &[u8], at: usize, fields: &[u8]) -> Bytes {
        let mut b = BytesMut::new();
        b.put_slice(&v1[..at]);
        b.put_slice(fields);
        b.put_slice(&v1[at..]);
        b.freeze()
    }

    #[test]
    fn share_fetch_v2_reads_the_new_fields_and_the_rest_as_v1() {
        let req = fetch_v1();
        let mut v1 = BytesMut::new();
        req.encode(&mut v1, 1).unwrap();
        // 1+1 ("g"), 1+8 ("member-1"), then six int32s.
        let mut body = v2_body(&v1, 2 + 9 + 24, &[1, 1]);
        let got = ShareFetch::decode(&mut body, 2).unwrap();
        assert_eq!(got.request, req);
        assert_eq!(got.acquire_mode, AcquireMode::RecordLimit);
        assert!(got.renew_ack);
        let mut body = v2_body(&v1, 2 + 9 + 24, &[0, 0]);
        let got = ShareFetch::decode(&mut body, 2).unwrap();
        assert_eq!(
            (got.acquire_mode, got.renew_ack),
            (AcquireMode::BatchOptimized, false)
        );
        let mut short = Bytes::copy_from_slice(&v1[..20]);
        assert!(ShareFetch::decode(&mut short, 2).is_err());
        let mut bad_mode = v2_body(&v1, 2 + 9 + 24, &[7, 0]);
        assert!(ShareFetch::decode(&mut bad_mode, 2).is_err());
    }

    #[test]
    fn share_acknowledge_v2_reads_is_renew_ack() {
        let req = ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_static_str("g"))))
            .with_member_id(Some(StrBytes::from_static_str("m")))
            .with_share_session_epoch(4)
            .with_topics(vec![AcknowledgeTopic::default()
                .with_topic_id(uuid::Uuid::from_u128(5))
                .with_partitions(vec![AcknowledgePartition::default()
                    .with_partition_index(0)
                    .with_acknowledgement_batches(vec![
                        AcknowledgementBatch::default()
                            .with_first_offset(1)
                            .with_last_offset(3)
                            .with_acknowledge_types(vec![4]),
                    ])])]);
        let mut v1 = BytesMut::new();
        req.encode(&mut v1, 1).unwrap();
        let mut body = v2_body(&v1, 2 + 2 + 4, &[1]);
        let got = ShareAcknowledge::decode(&mut body, 2).unwrap();
        assert_eq!(got.request, req);
        assert!(got.renew_ack);
    }

    #[test]
    fn v2_messages_round_trip() {
        let fetch = ShareFetch {
            request: fetch_v1(),
            acquire_mode: AcquireMode::RecordLimit,
            renew_ack: true,
        };
        let mut b = BytesMut::new();
        fetch.encode(&mut b, 2).unwrap();
        assert_eq!(b.len(), fetch.compute_size(2).unwrap());
        assert_eq!(ShareFetch::decode(&mut b.freeze(), 2).unwrap(), fetch);
        assert!(fetch.encode(&mut BytesMut::new(), 1).is_err());
        let ack = ShareAcknowledge {
            request: ShareAcknowledgeRequest::default().with_share_session_epoch(2),
            renew_ack: true,
        };
        let mut b = BytesMut::new();
        ack.encode(&mut b, 2).unwrap();
        assert_eq!(ShareAcknowledge::decode(&mut b.freeze(), 2).unwrap(), ack);
        let reply = ShareAcknowledgeReply {
            response: ShareAcknowledgeResponse::default().with_error_code(42),
            acquisition_lock_timeout_ms: 30_000,
        };
        let mut b = BytesMut::new();
        reply.encode(&mut b, 2).unwrap();
        assert_eq!(
            ShareAcknowledgeReply::decode(&mut b.freeze(), 2).unwrap(),
            reply
        );
    }

    #[test]
    fn share_fetch_reply_v2_is_v1() {
        let reply: ShareFetchReply =
            LaidOutAs(ShareFetchResponse::default().with_acquisition_lock_timeout_ms(9));
        let (mut v1, mut v2) = (BytesMut::new(), BytesMut::new());
        reply.0.encode(&mut v1, 1).unwrap();
        reply.encode(&mut v2, 2).unwrap();
        assert_eq!(v1, v2);
        assert_eq!(reply.compute_size(2).unwrap(), v1.len());
    }

    #[test]
    fn share_acknowledge_reply_v2_carries_the_lock_timeout() {
        let reply = ShareAcknowledgeReply {
            response: ShareAcknowledgeResponse::default()
                .with_throttle_time_ms(1)
                .with_error_message(Some(StrBytes::from_static_str("ab"))),
            acquisition_lock_timeout_ms: 15_000,
        };
        let mut v1 = BytesMut::new();
        reply.encode(&mut v1, 1).unwrap();
        let mut v2 = BytesMut::new();
        reply.encode(&mut v2, 2).unwrap();
        assert_eq!(v2.len(), reply.compute_size(2).unwrap());
        assert_eq!(v1.len(), reply.compute_size(1).unwrap());
        // throttle 4, error 2, "ab" 1+2, then the timeout.
        assert_eq!(&v2[9..13], &15_000i32.to_be_bytes());
        assert_eq!(&v2[..9], &v1[..9]);
        assert_eq!(&v2[13..], &v1[9..]);
    }

    fn offsets_reply() -> ShareGroupOffsetsReply {
        use kafka_protocol::messages::describe_share_group_offsets_response::*;
        let part = |i: i32, msg: Option<&'static str>| {
            DescribeShareGroupOffsetsResponsePartition::default()
                .with_partition_index(i)
                .with_start_offset(3)
                .with_leader_epoch(1)
                .with_error_message(msg.map(StrBytes::from_static_str))
        };
        let topic = |name: &'static str, id: u128, parts| {
            DescribeShareGroupOffsetsResponseTopic::default()
                .with_topic_name(kafka_protocol::messages::TopicName(
                    StrBytes::from_static_str(name),
                ))
                .with_topic_id(Uuid::from_u128(id))
                .with_partitions(parts)
        };
        let response = DescribeShareGroupOffsetsResponse::default().with_groups(vec![
            DescribeShareGroupOffsetsResponseGroup::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g1")))
                .with_topics(vec![
                    topic("a", 1, vec![part(0, None), part(1, Some("late"))]),
                    topic("bb", 2, vec![part(0, None)]),
                ]),
            DescribeShareGroupOffsetsResponseGroup::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g2")))
                .with_error_code(69)
                .with_error_message(Some(StrBytes::from_static_str("no such group"))),
        ]);
        let lags = [
            (("g1".to_string(), Uuid::from_u128(1), 0), 2),
            (("g1".to_string(), Uuid::from_u128(1), 1), 0),
            (("g1".to_string(), Uuid::from_u128(2), 0), 7),
        ];
        ShareGroupOffsetsReply {
            response,
            lags: lags.into_iter().collect(),
        }
    }

    #[test]
    fn share_group_offsets_v1_puts_the_lag_after_each_partition_leader_epoch() {
        let reply = offsets_reply();
        let (mut v0, mut v1) = (BytesMut::new(), BytesMut::new());
        reply.encode(&mut v0, 0).unwrap();
        reply.encode(&mut v1, 1).unwrap();
        assert_eq!(v1.len(), v0.len() + 3 * 8);
        assert_eq!(reply.compute_size(1).unwrap(), v1.len());
        // throttle 4, groups 1, "g1" 3, topics 1, "a" 2, id 16, partitions 1, then the
        // first partition's index 4, start 8, epoch 4 and its lag.
        let at = 4 + 1 + 3 + 1 + 2 + 16 + 1 + 16;
        assert_eq!(&v1[at..at + 8], &2i64.to_be_bytes());
        assert_eq!(&v1[..at], &v0[..at]);
        let got = ShareGroupOffsetsReply::decode(&mut v1.freeze(), 1).unwrap();
        assert_eq!(got, reply);
        // v0 carries no lag; a partition with none is sent as unknown.
        let got = ShareGroupOffsetsReply::decode(&mut v0.freeze(), 0).unwrap();
        assert!(got.lags.is_empty());
        let mut b = BytesMut::new();
        got.encode(&mut b, 1).unwrap();
        let back = ShareGroupOffsetsReply::decode(&mut b.freeze(), 1).unwrap();
        assert_eq!(back.lags.len(), 3);
        assert!(back.lags.values().all(|l| *l == -1));
    }

    #[test]
    fn share_state_summary_v1_round_trips_the_delivery_complete_counts() {
        use kafka_protocol::messages::read_share_group_state_summary_response::*;
        let part = |i: i32, msg: Option<&'static str>| {
            PartitionResult::default()
                .with_partition(i)
                .with_state_epoch(2)
                .with_leader_epoch(3)
                .with_start_offset(40)
                .with_error_message(msg.map(StrBytes::from_static_str))
        };
        let reply = ShareStateSummaryReply {
            response: ReadShareGroupStateSummaryResponse::default().with_results(vec![
                ReadStateSummaryResult::default()
                    .with_topic_id(Uuid::from_u128(4))
                    .with_partitions(vec![part(0, Some("x")), part(5, None)]),
                ReadStateSummaryResult::default().with_topic_id(Uuid::from_u128(6)),
            ]),
            delivery_complete: [((Uuid::from_u128(4), 0), 11), ((Uuid::from_u128(4), 5), 0)]
                .into_iter()
                .collect(),
        };
        let (mut v0, mut v1) = (BytesMut::new(), BytesMut::new());
        reply.encode(&mut v0, 0).unwrap();
        reply.encode(&mut v1, 1).unwrap();
        assert_eq!(v1.len(), v0.len() + 2 * 4);
        // results 1, id 16, partitions 1, partition 4, error 2, "x" 2, state epoch 4,
        // leader epoch 4, start 8, then the count.
        let at = 1 + 16 + 1 + 4 + 2 + 2 + 16;
        assert_eq!(&v1[at..at + 4], &11i32.to_be_bytes());
        assert_eq!(
            ShareStateSummaryReply::decode(&mut v1.freeze(), 1).unwrap(),
            reply
        );
    }

    #[test]
    fn a_body_cut_short_or_claiming_too_many_elements_is_refused() {
        let mut v1 = BytesMut::new();
        offsets_reply().encode(&mut v1, 1).unwrap();
        for n in [0, 5, 30, v1.len() - 1] {
            let mut short = Bytes::copy_from_slice(&v1[..n]);
            assert!(
                ShareGroupOffsetsReply::decode(&mut short, 1).is_err(),
                "{n}"
            );
        }
        // A group count of 2^28 in a few bytes.
        let mut huge = Bytes::from_static(&[0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x01, 0]);
        assert!(ShareGroupOffsetsReply::decode(&mut huge, 1).is_err());
    }
}
