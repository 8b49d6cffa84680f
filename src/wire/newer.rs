//! Versions newer than kafka-protocol 0.18 knows, for the messages that need them: each adds
//! fixed-size fields to a message the crate decodes and encodes at the version before. A
//! request is read by cutting the new fields out of the body and decoding the rest at the
//! older version; a response is encoded at the older version with the new fields put in.
//!
//! - ShareFetch v2 (KIP-1206, KIP-1222): `ShareAcquireMode` int8 and `IsRenewAck` bool after
//!   `BatchSize`. The response is the same as v1 ([`ShareFetchReply`] writes it so).
//! - ShareAcknowledge v2 (KIP-1222): `IsRenewAck` bool after `ShareSessionEpoch`; the response
//!   adds `AcquisitionLockTimeoutMs` int32 after `ErrorMessage`.
//!
//! Both directions are here (the integration tests speak v2 as clients). The field layouts
//! are those of Kafka 4.4's `ShareFetchRequest.json`,
//! `ShareAcknowledgeRequest.json` and `ShareAcknowledgeResponse.json`.

use anyhow::{anyhow, Result};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest,
    ShareFetchResponse,
};
use kafka_protocol::protocol::buf::{ByteBuf, ByteBufMut};
use kafka_protocol::protocol::{Decodable, Encodable};

/// The APIs this module extends, with the newest version it reads and writes.
pub const VERSIONS: &[(ApiKey, i16)] = &[(ApiKey::ShareFetch, 2), (ApiKey::ShareAcknowledge, 2)];

/// ShareFetch's acquire mode (KIP-1206, the client's `share.acquire.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AcquireMode {
    /// Whole batches, until at least MaxRecords records are acquired.
    #[default]
    BatchOptimized = 0,
    /// At most MaxRecords records, splitting batches.
    RecordLimit = 1,
}

/// A ShareFetch request of any version Cairn serves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareFetch {
    pub request: ShareFetchRequest,
    pub acquire_mode: AcquireMode,
    /// The acknowledgements renew locks; nothing is fetched.
    pub renew_ack: bool,
}

/// A ShareFetch response of any version Cairn serves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareFetchReply(pub ShareFetchResponse);

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

impl Decodable for ShareFetch {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        if version < 2 {
            return Ok(ShareFetch {
                request: ShareFetchRequest::decode(buf, version)?,
                ..Default::default()
            });
        }
        let body = take_all(buf);
        let at = share_fetch_fields_at(&body)?;
        if at + 2 > body.len() {
            return Err(anyhow!("ShareFetch v2 body too short"));
        }
        let acquire_mode = match body[at] {
            0 => AcquireMode::BatchOptimized,
            1 => AcquireMode::RecordLimit,
            m => return Err(anyhow!("unknown ShareAcquireMode {m}")),
        };
        let renew_ack = body[at + 1] != 0;
        let mut rest = cut(&body, at, 2);
        Ok(ShareFetch {
            request: ShareFetchRequest::decode(&mut rest, 1)?,
            acquire_mode,
            renew_ack,
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
        let body = take_all(buf);
        let at = share_acknowledge_field_at(&body)?;
        if at >= body.len() {
            return Err(anyhow!("ShareAcknowledge v2 body too short"));
        }
        let renew_ack = body[at] != 0;
        let mut rest = cut(&body, at, 1);
        Ok(ShareAcknowledge {
            request: ShareAcknowledgeRequest::decode(&mut rest, 1)?,
            renew_ack,
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
        encode_with(&self.request, 1, share_fetch_fields_at, &fields, buf)
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
        encode_with(&self.request, 1, share_acknowledge_field_at, &field, buf)
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        let v1 = self.request.compute_size(version.min(1))?;
        Ok(if version >= 2 { v1 + 1 } else { v1 })
    }
}

impl Decodable for ShareFetchReply {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {
        Ok(ShareFetchReply(ShareFetchResponse::decode(
            buf,
            version.min(1),
        )?))
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
        let body = take_all(buf);
        let at = lock_timeout_at(&body)?;
        let timeout = body
            .get(at..at + 4)
            .ok_or_else(|| anyhow!("ShareAcknowledge v2 response too short"))?;
        let acquisition_lock_timeout_ms = i32::from_be_bytes(timeout.try_into()?);
        let mut rest = cut(&body, at, 4);
        Ok(ShareAcknowledgeReply {
            response: ShareAcknowledgeResponse::decode(&mut rest, 1)?,
            acquisition_lock_timeout_ms,
        })
    }
}

impl Encodable for ShareFetchReply {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {
        self.0.encode(buf, version.min(1))
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        self.0.compute_size(version.min(1))
    }
}

impl Encodable for ShareAcknowledgeReply {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {
        if version < 2 {
            return self.response.encode(buf, version);
        }
        let timeout = self.acquisition_lock_timeout_ms.to_be_bytes();
        encode_with(&self.response, 1, lock_timeout_at, &timeout, buf)
    }

    fn compute_size(&self, version: i16) -> Result<usize> {
        let v1 = self.response.compute_size(version.min(1))?;
        Ok(if version >= 2 { v1 + 4 } else { v1 })
    }
}

/// Where ShareFetch v2's new fields sit: after GroupId, MemberId and six int32s.
fn share_fetch_fields_at(body: &[u8]) -> Result<usize> {
    skip_compact_string(body, 0)
        .and_then(|at| skip_compact_string(body, at))
        .map(|at| at + 6 * 4)
        .filter(|at| *at <= body.len())
        .ok_or_else(|| anyhow!("ShareFetch body too short"))
}

/// Where ShareAcknowledge v2's `IsRenewAck` sits: after GroupId, MemberId and the epoch.
fn share_acknowledge_field_at(body: &[u8]) -> Result<usize> {
    skip_compact_string(body, 0)
        .and_then(|at| skip_compact_string(body, at))
        .map(|at| at + 4)
        .filter(|at| *at <= body.len())
        .ok_or_else(|| anyhow!("ShareAcknowledge body too short"))
}

/// Where ShareAcknowledge v2's `AcquisitionLockTimeoutMs` sits in the response: after
/// ThrottleTimeMs, ErrorCode and ErrorMessage.
fn lock_timeout_at(body: &[u8]) -> Result<usize> {
    skip_compact_string(body, 6).ok_or_else(|| anyhow!("ShareAcknowledge response too short"))
}

/// `message` encoded at `version`, with `fields` put in at the place `at` finds.
fn encode_with<M: Encodable, B: ByteBufMut>(
    message: &M,
    version: i16,
    at: fn(&[u8]) -> Result<usize>,
    fields: &[u8],
    buf: &mut B,
) -> Result<()> {
    let mut old = BytesMut::with_capacity(message.compute_size(version)?);
    message.encode(&mut old, version)?;
    let at = at(&old)?;
    buf.put_slice(&old[..at]);
    buf.put_slice(fields);
    buf.put_slice(&old[at..]);
    Ok(())
}

fn take_all<B: ByteBuf>(buf: &mut B) -> Bytes {
    let n = buf.remaining();
    buf.get_bytes(n)
}

/// `body` without its `len` bytes at `at`.
fn cut(body: &[u8], at: usize, len: usize) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() - len);
    out.put_slice(&body[..at]);
    out.put_slice(&body[at + len..]);
    out.freeze()
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
        let reply =
            ShareFetchReply(ShareFetchResponse::default().with_acquisition_lock_timeout_ms(9));
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
}
