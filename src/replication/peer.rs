//! One request to another broker on its inter-broker listener, and its answer: what the
//! transaction coordinator sends partition leaders (WriteTxnMarkers) and what a leader
//! sends the transaction coordinator (AddPartitionsToTxn verification, KIP-890). A
//! connection per call: these are a few per transaction, not per record.

use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::ResponseError;
use tokio::io::AsyncWriteExt;

use crate::dial::Dialer;
use crate::wire::{self, frame::FrameReader};

/// The largest answer accepted: these answers name a few partitions.
const ANSWER_BYTES_MAX: usize = 8 << 20;

/// Sends `req` to `addr` and reads the answer, within `timeout`. A broker that cannot be
/// reached (or logged in to), answers nothing or answers garbage is a NETWORK_EXCEPTION
/// (retriable); no answer in time, REQUEST_TIMED_OUT.
pub async fn call<Req: Encodable, Resp: Decodable>(
    dial: &Dialer,
    addr: &str,
    api: ApiKey,
    version: i16,
    req: &Req,
    timeout: Duration,
) -> Result<Resp, ResponseError> {
    let exchange = async {
        let frame = wire::request_frame(api, version, 1, "cairn-broker", req)
            .map_err(|_| ResponseError::UnknownServerError)?;
        let mut stream = dial.connect(addr).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                tracing::warn!(error = %e, "cannot log in to another broker");
            }
            ResponseError::NetworkException
        })?;
        stream
            .write_all(&frame)
            .await
            .map_err(|_| ResponseError::NetworkException)?;
        let answer = FrameReader::new(stream, ANSWER_BYTES_MAX)
            .next()
            .await
            .ok()
            .flatten()
            .ok_or(ResponseError::NetworkException)?;
        wire::decode_response(api, version, 1, answer).map_err(|e| {
            tracing::warn!(%addr, ?api, error = %e, "undecodable answer from a broker");
            ResponseError::NetworkException
        })
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(ResponseError::RequestTimedOut))
}
