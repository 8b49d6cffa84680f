//! The Kafka wire format as both ends of a connection use it, below every layer that talks
//! Kafka: length-prefixed frames ([`frame`]), request and response envelopes (header + body,
//! encoded with kafka-protocol), and small constructors for kafka-protocol's newtypes.
//!
//! The server reads requests and writes responses with it; the replica fetcher writes
//! requests and reads responses with the same code, and so do the integration tests.

pub mod frame;
pub mod newer;
pub mod splice;
pub mod throttle_time;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, BrokerId, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// Why an envelope could not be built or read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("cannot encode {api:?} v{version}: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("cannot decode {api:?} v{version}: {reason}")]
    Decode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("answer to request {got}, expected {expected}")]
    Correlation { expected: i32, got: i32 },
}

pub fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

pub fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

pub fn broker_id(id: i32) -> BrokerId {
    BrokerId(id)
}

/// A request frame: length prefix, header of the version `api` and `version` call for, body.
pub fn request_frame<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &T,
) -> Result<Bytes, WireError> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(str_bytes(client_id)));
    envelope(
        api,
        version,
        &header,
        api.request_header_version(version),
        body,
        |size| BytesMut::with_capacity(4 + size),
    )
    .map(BytesMut::freeze)
}

/// A response frame: length prefix, response header, body.
pub fn response_frame<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, WireError> {
    response_frame_into(api, version, correlation_id, body, |size| {
        BytesMut::with_capacity(4 + size)
    })
    .map(BytesMut::freeze)
}

/// The same frame, written into the buffer `buffer` makes for a header and body of the
/// size it is given ([`splice`] passes one that keeps large record sets by reference).
pub(crate) fn response_frame_into<T: Encodable, B: ByteBufMut>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
    buffer: impl FnOnce(usize) -> B,
) -> Result<B, WireError> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    envelope(
        api,
        version,
        &header,
        api.response_header_version(version),
        body,
        buffer,
    )
}

/// Header and body behind a length prefix, sized up front so that a large fetch response is
/// written into one allocation.
fn envelope<H: Encodable, T: Encodable, B: ByteBufMut>(
    api: ApiKey,
    version: i16,
    header: &H,
    header_version: i16,
    body: &T,
    buffer: impl FnOnce(usize) -> B,
) -> Result<B, WireError> {
    let encode_error = |e: anyhow::Error| WireError::Encode {
        api,
        version,
        reason: e.to_string(),
    };
    let size = header
        .compute_size(header_version)
        .and_then(|h| body.compute_size(version).map(|b| h + b))
        .map_err(encode_error)?;
    let mut buf = buffer(size);
    buf.put_i32(size as i32);
    header
        .encode(&mut buf, header_version)
        .and_then(|_| body.encode(&mut buf, version))
        .map_err(encode_error)?;
    Ok(buf)
}

/// Reads a response frame (without its length prefix): checks that it answers
/// `correlation_id` and decodes the body. Bytes left after the body are ignored, as newer
/// brokers may append fields an older version does not know.
pub fn decode_response<T: Decodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    mut frame: Bytes,
) -> Result<T, WireError> {
    let decode_error = |e: anyhow::Error| WireError::Decode {
        api,
        version,
        reason: e.to_string(),
    };
    let header = ResponseHeader::decode(&mut frame, api.response_header_version(version))
        .map_err(decode_error)?;
    if header.correlation_id != correlation_id {
        return Err(WireError::Correlation {
            expected: correlation_id,
            got: header.correlation_id,
        });
    }
    T::decode(&mut frame, version).map_err(decode_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};

    #[test]
    fn request_and_response_frames_round_trip() {
        let req = MetadataRequest::default().with_topics(None);
        let f = request_frame(ApiKey::Metadata, 12, 7, "t", &req).unwrap();
        let len = i32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize;
        assert_eq!(len, f.len() - 4, "the prefix counts the rest");
        let mut body = f.slice(4..);
        let h =
            RequestHeader::decode(&mut body, ApiKey::Metadata.request_header_version(12)).unwrap();
        assert_eq!((h.request_api_key, h.correlation_id), (3, 7));
        assert_eq!(MetadataRequest::decode(&mut body, 12).unwrap(), req);

        let resp = MetadataResponse::default().with_cluster_id(Some(str_bytes("c")));
        let f = response_frame(ApiKey::Metadata, 12, 7, &resp).unwrap();
        let back: MetadataResponse =
            decode_response(ApiKey::Metadata, 12, 7, f.slice(4..)).unwrap();
        assert_eq!(back, resp);
        let wrong = decode_response::<MetadataResponse>(ApiKey::Metadata, 12, 8, f.slice(4..));
        assert!(matches!(wrong, Err(WireError::Correlation { .. })));
    }
}
