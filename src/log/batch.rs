//! The v2 record batch header, read and validated straight from the bytes a producer sent.
//!
//! Cairn never decodes and re-encodes a client's records: it checks the 61-byte header
//! (magic, lengths, CRC-32C, count against the last offset delta), then rewrites only the base
//! offset (bytes 0..8) and the partition leader epoch (bytes 12..16), which lie outside the
//! CRC, and stores the bytes as they are.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};

use crate::error::{Error, Result};

/// Size of the v2 batch header; the records follow it.
pub const HEADER_BYTES: usize = 61;
/// Bytes before the `batch_length` field's count starts (base offset + length).
pub const LOG_OVERHEAD: usize = 12;
const CRC_START: usize = 21;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;
/// KIP-534: the base timestamp holds the time after which the batch's tombstones (and
/// transaction markers) may be removed.
const ATTR_DELETE_HORIZON: i16 = 0x40;

/// The fields of a v2 batch header that the broker uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Length of the whole batch in bytes, including the 12 bytes of offset and length.
    pub size: usize,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
    /// The stored CRC-32C (not checked by `parse`).
    pub crc: u32,
}

impl BatchHeader {
    /// Reads the header at the start of `buf` without checking the CRC. Fails if `buf` is
    /// too short for the header or for the length the header claims.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader> {
        if buf.len() < HEADER_BYTES {
            return Err(Error::CorruptMessage(format!(
                "record batch of {} bytes is shorter than the {HEADER_BYTES}-byte header",
                buf.len()
            )));
        }
        let batch_length = be_i32(buf, 8);
        if batch_length < (HEADER_BYTES - LOG_OVERHEAD) as i32 {
            return Err(Error::CorruptMessage(format!(
                "record batch length {batch_length} is too small"
            )));
        }
        let size = batch_length as usize + LOG_OVERHEAD;
        if size > buf.len() {
            return Err(Error::CorruptMessage(format!(
                "record batch claims {size} bytes but only {} are present",
                buf.len()
            )));
        }
        let magic = buf[16] as i8;
        if magic != 2 {
            return Err(Error::InvalidRecord(format!(
                "record batch magic {magic} is not 2"
            )));
        }
        let base_offset = be_i64(buf, 0);
        let last_offset_delta = be_i32(buf, 23);
        // The batch's last offset and the offset after it must exist: a leader's answer
        // with a base offset near i64::MAX would otherwise wrap a follower's log end offset
        // negative, and one near i64::MIN with a negative delta its last offset (found by
        // fuzzing a follower's fetch answers). A negative delta that does not overflow is
        // left to `validate`, which refuses it as INVALID_RECORD, as Kafka does.
        let delta = last_offset_delta as i64;
        if base_offset.checked_add(delta).is_none() || base_offset.checked_add(delta + 1).is_none()
        {
            return Err(Error::CorruptMessage(format!(
                "record batch offsets {base_offset} + {last_offset_delta} overflow"
            )));
        }
        Ok(BatchHeader {
            base_offset,
            size,
            partition_leader_epoch: be_i32(buf, 12),
            attributes: i16::from_be_bytes([buf[21], buf[22]]),
            last_offset_delta,
            base_timestamp: be_i64(buf, 27),
            max_timestamp: be_i64(buf, 35),
            producer_id: be_i64(buf, 43),
            producer_epoch: i16::from_be_bytes([buf[51], buf[52]]),
            base_sequence: be_i32(buf, 53),
            record_count: be_i32(buf, 57),
            crc: be_i32(buf, 17) as u32,
        })
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }

    pub fn compression(&self) -> u8 {
        (self.attributes & ATTR_COMPRESSION_MASK) as u8
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_TIMESTAMP_TYPE != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// The delete horizon a cleaning set on this batch (KIP-534), if any.
    pub fn delete_horizon(&self) -> Option<i64> {
        (self.attributes & ATTR_DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }

    pub fn is_idempotent(&self) -> bool {
        self.producer_id >= 0
    }

    /// Sequence number of the last record, wrapping as Kafka's sequences do.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return -1;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        (last % (i32::MAX as i64 + 1)) as i32
    }
}

/// Validates one produced partition's records as Kafka's LogValidator does for magic 2: exactly
/// one batch, a matching CRC-32C, a record count that agrees with the offset range, a known
/// codec, no control batches from clients, and a size within `max_message_bytes`.
pub fn validate_produced(records: &[u8], max_message_bytes: i32) -> Result<BatchHeader> {
    if records.is_empty() {
        return Err(Error::InvalidRecord(
            "no record batch in the produce request".into(),
        ));
    }
    let header = BatchHeader::parse(records)?;
    if header.size != records.len() {
        // Either trailing garbage or a second batch: Kafka accepts exactly one v2 batch.
        return Err(Error::InvalidRecord(format!(
            "expected exactly one record batch of {} bytes, found {} bytes",
            header.size,
            records.len()
        )));
    }
    if header.size > max_message_bytes.max(0) as usize {
        return Err(Error::MessageTooLarge {
            size: header.size,
            max: max_message_bytes,
        });
    }
    let stored_crc = u32::from_be_bytes([records[17], records[18], records[19], records[20]]);
    let crc = crc32c::crc32c(&records[CRC_START..header.size]);
    if crc != stored_crc {
        return Err(Error::CorruptMessage(format!(
            "record batch CRC {stored_crc:#010x} does not match the computed {crc:#010x}"
        )));
    }
    if header.last_offset_delta < 0 {
        return Err(Error::InvalidRecord(format!(
            "record batch has a negative last offset delta {}",
            header.last_offset_delta
        )));
    }
    if header.record_count <= 0 {
        return Err(Error::InvalidRecord(format!(
            "invalid record count {} in record batch",
            header.record_count
        )));
    }
    if header.record_count as i64 != header.last_offset_delta as i64 + 1 {
        return Err(Error::InvalidRecord(format!(
            "record count {} does not match the offset range of {} records",
            header.record_count,
            header.last_offset_delta as i64 + 1
        )));
    }
    if header.compression() > 4 {
        return Err(Error::UnsupportedCompressionType(header.compression()));
    }
    if header.is_control() {
        return Err(Error::InvalidRecord(
            "clients may not write control batches".into(),
        ));
    }
    if header.is_transactional() && !header.is_idempotent() {
        return Err(Error::InvalidRecord(
            "a transactional record batch needs a producer id".into(),
        ));
    }
    Ok(header)
}

/// Copies a validated batch and stamps the broker-assigned base offset and leader epoch.
/// With `log_append_time_ms`, also sets the timestamp type and max timestamp and recomputes
/// the CRC, as Kafka does for topics with `message.timestamp.type=LogAppendTime`.
pub fn stamp(
    records: &[u8],
    base_offset: i64,
    leader_epoch: i32,
    log_append_time_ms: Option<i64>,
) -> Bytes {
    let mut b = BytesMut::from(records);
    b[0..8].copy_from_slice(&base_offset.to_be_bytes());
    b[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
    if let Some(now) = log_append_time_ms {
        let attributes = i16::from_be_bytes([b[21], b[22]]) | ATTR_TIMESTAMP_TYPE;
        b[21..23].copy_from_slice(&attributes.to_be_bytes());
        b[35..43].copy_from_slice(&now.to_be_bytes());
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    b.freeze()
}

/// What a control batch marks: the end of a transaction (Kafka's `ControlRecordType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
}

/// Builds the control batch a transaction marker is written as (Kafka's
/// `EndTransactionMarker`): transactional and control attributes, base sequence -1, and one
/// record whose key is version 0 + the type (0 ABORT, 1 COMMIT) and whose value is version 0
/// + the coordinator epoch. Base offset and leader epoch are stamped on append.
pub fn control_batch(
    producer_id: i64,
    producer_epoch: i16,
    kind: ControlType,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Bytes {
    let kind: i16 = match kind {
        ControlType::Abort => 0,
        ControlType::Commit => 1,
    };
    let mut body = vec![0u8]; // record attributes
    put_varlong(&mut body, 0); // timestamp delta
    put_varlong(&mut body, 0); // offset delta
    put_varlong(&mut body, 4);
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&kind.to_be_bytes());
    put_varlong(&mut body, 6);
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&coordinator_epoch.to_be_bytes());
    put_varlong(&mut body, 0); // no headers
    let mut b = Vec::with_capacity(HEADER_BYTES + body.len() + 2);
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // batch length, set below
    b.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch, stamped on append
    b.push(2);
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, set below
    b.extend_from_slice(&(ATTR_TRANSACTIONAL | ATTR_CONTROL).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
    b.extend_from_slice(&timestamp.to_be_bytes());
    b.extend_from_slice(&timestamp.to_be_bytes());
    b.extend_from_slice(&producer_id.to_be_bytes());
    b.extend_from_slice(&producer_epoch.to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    put_varlong(&mut b, body.len() as i64);
    b.extend_from_slice(&body);
    let len = (b.len() - LOG_OVERHEAD) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// The type of a control batch's marker; `None` for a data batch, or a control record this
/// broker does not know (Kafka skips those too).
pub fn control_type(batch: &[u8], header: &BatchHeader) -> Option<ControlType> {
    let (key, _) = control_record(batch, header)?;
    match i16::from_be_bytes(key.get(2..4)?.try_into().ok()?) {
        0 => Some(ControlType::Abort),
        1 => Some(ControlType::Commit),
        _ => None,
    }
}

/// The coordinator epoch a transaction marker carries in its value.
pub fn marker_coordinator_epoch(batch: &[u8], header: &BatchHeader) -> Option<i32> {
    let (_, value) = control_record(batch, header)?;
    Some(i32::from_be_bytes(value.get(2..6)?.try_into().ok()?))
}

/// The key and value of a control batch's one record.
fn control_record(batch: &[u8], header: &BatchHeader) -> Option<(Vec<u8>, Vec<u8>)> {
    if !header.is_control() {
        return None;
    }
    let records = plain_records(batch, header)?;
    let (len, n) = read_varint(&records)?;
    let body = records.get(n..n + usize::try_from(len).ok()?)?;
    // attributes: i8, timestampDelta: varlong, offsetDelta: varint, then key and value.
    let rest = body.get(1..)?;
    let (_, n1) = read_varlong(rest)?;
    let rest = rest.get(n1..)?;
    let (_, n2) = read_varint(rest)?;
    let rest = rest.get(n2..)?;
    let (key_len, n3) = read_varint(rest)?;
    let key = rest.get(n3..n3 + usize::try_from(key_len).ok()?)?;
    let rest = rest.get(n3 + key.len()..)?;
    let (value_len, n4) = read_varint(rest)?;
    let value = rest.get(n4..n4 + usize::try_from(value_len).ok()?)?;
    Some((key.to_vec(), value.to_vec()))
}

fn put_varlong(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Splits stored log bytes (one or more whole batches) into batch headers, stopping at the
/// first that does not parse.
pub fn headers(mut buf: &[u8]) -> impl Iterator<Item = BatchHeader> + '_ {
    std::iter::from_fn(move || {
        let h = BatchHeader::parse(buf).ok()?;
        buf = &buf[h.size..];
        Some(h)
    })
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// The most bytes one batch's records may decompress to. Kafka streams a compressed batch
/// record by record and never holds it whole; Cairn does hold it, so a batch that claims or
/// expands to more (a decompression bomb: a few hundred bytes of zstd or a snappy header can
/// ask for gigabytes) is treated as one that does not decompress.
pub const PLAIN_RECORDS_MAX: usize = 128 << 20;

/// The records section of a batch as plain bytes: borrowed when uncompressed, decompressed
/// with the batch's codec otherwise. `None` when the codec is unknown, the data does not
/// decompress, or it decompresses to more than [`PLAIN_RECORDS_MAX`].
pub(crate) fn plain_records<'a>(batch: &'a [u8], header: &BatchHeader) -> Option<Cow<'a, [u8]>> {
    let body = batch.get(HEADER_BYTES..header.size.min(batch.len()))?;
    match header.compression() {
        0 => Some(Cow::Borrowed(body)),
        codec => decompress(codec, body, PLAIN_RECORDS_MAX).map(Cow::Owned),
    }
}

/// `body` decompressed with Kafka's codec number `codec`, if that takes at most `limit`
/// bytes. Memory follows the bytes produced, never a length the data claims.
fn decompress(codec: u8, body: &[u8], limit: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    let bounded = |reader: &mut dyn Read| {
        let mut out = Vec::new();
        reader.take(limit as u64 + 1).read_to_end(&mut out).ok()?;
        (out.len() <= limit).then_some(out)
    };
    match codec {
        // Java's GZIPInputStream reads concatenated members, so does this.
        1 => bounded(&mut flate2::read::MultiGzDecoder::new(body)),
        2 => snappy(body, limit),
        3 => bounded(&mut lz4::Decoder::new(body).ok()?),
        4 => bounded(&mut zstd::stream::read::Decoder::with_buffer(body).ok()?),
        _ => None,
    }
}

/// Kafka's snappy: xerial's framing (a magic header, then blocks each prefixed with their
/// compressed length) or, without the magic, one raw block, as snappy-java reads it. A block
/// states its plain length up front; it is checked against what is left of `limit` before
/// any memory is taken for it.
fn snappy(body: &[u8], limit: usize) -> Option<Vec<u8>> {
    const MAGIC: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
    let mut out = Vec::new();
    let block = |compressed: &[u8], out: &mut Vec<u8>| {
        let len = snap::raw::decompress_len(compressed).ok()?;
        if len > limit - out.len() {
            return None;
        }
        let start = out.len();
        out.resize(start + len, 0);
        let n = snap::raw::Decoder::new()
            .decompress(compressed, &mut out[start..])
            .ok()?;
        out.truncate(start + n);
        Some(())
    };
    let Some(mut rest) = body.strip_prefix(MAGIC) else {
        block(body, &mut out)?;
        return Some(out);
    };
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let compressed = rest.get(4..4usize.checked_add(len)?)?;
        block(compressed, &mut out)?;
        rest = &rest[4 + len..];
    }
    Some(out)
}

/// The (offset delta, timestamp) of each record of a CreateTime batch, in order, stopping at
/// the first record that does not parse; compressed batches are decompressed first.
/// LogAppendTime batches yield nothing (their records' timestamps are not the batch's), and
/// callers fall back to batch granularity.
fn record_timestamps(batch: &[u8], header: &BatchHeader) -> Vec<(i32, i64)> {
    let records = match header.is_log_append_time() {
        true => None,
        false => plain_records(batch, header),
    };
    let Some(records) = records else {
        return Vec::new();
    };
    let mut pos = 0usize;
    (0..header.record_count)
        .map_while(|_| {
            let (len, n) = read_varint(records.get(pos..)?)?;
            let body_start = pos + n;
            let body = records.get(body_start..body_start + usize::try_from(len).ok()?)?;
            // attributes: i8, then timestampDelta: varlong, offsetDelta: varint.
            let rest = body.get(1..)?;
            let (ts_delta, n1) = read_varlong(rest)?;
            let (offset_delta, _) = read_varint(rest.get(n1..)?)?;
            pos = body_start + len as usize;
            Some((
                offset_delta as i32,
                header.base_timestamp.wrapping_add(ts_delta),
            ))
        })
        .collect()
}

/// The offset delta and timestamp of the first record whose timestamp is at least `target`.
pub fn find_timestamp_in_batch(
    batch: &[u8],
    header: &BatchHeader,
    target: i64,
) -> Option<(i32, i64)> {
    record_timestamps(batch, header)
        .into_iter()
        .find(|(_, ts)| *ts >= target)
}

/// The offset delta and timestamp of the record with the largest timestamp (the first one on
/// ties, as Kafka does).
pub fn max_timestamp_record(batch: &[u8], header: &BatchHeader) -> Option<(i32, i64)> {
    record_timestamps(batch, header)
        .into_iter()
        .fold(None, |best: Option<(i32, i64)>, (d, ts)| match best {
            Some((_, b)) if b >= ts => best,
            _ => Some((d, ts)),
        })
}

/// One record of a batch, as the log cleaner sees it (borrowed from the plain records).
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    pub offset_delta: i32,
    pub timestamp_delta: i64,
    /// None for a record without a key.
    pub key: Option<&'a [u8]>,
    /// A null value: a tombstone.
    pub is_tombstone: bool,
    /// The record after its length prefix.
    body: &'a [u8],
    /// Where the timestamp delta ends in `body` (it starts after the attributes byte).
    timestamp_end: usize,
}

/// The records of `plain` (a batch's records section, decompressed), `count` of them.
/// Fails if they do not parse.
pub fn parse_records(plain: &[u8], count: i32) -> Result<Vec<RecordRef<'_>>> {
    let bad = |what: &str| Error::CorruptMessage(format!("record batch: {what}"));
    // The count is the sender's word: every record takes bytes, so reserve no more than
    // the bytes could hold.
    let mut out = Vec::with_capacity((count.max(0) as usize).min(plain.len()));
    let mut pos = 0usize;
    for _ in 0..count.max(0) {
        let (len, n) = read_varint(&plain[pos..]).ok_or_else(|| bad("bad record length"))?;
        let start = pos + n;
        let len = usize::try_from(len).map_err(|_| bad("negative record length"))?;
        let body = plain
            .get(start..start + len)
            .ok_or_else(|| bad("record past the batch end"))?;
        let mut at = 1usize; // attributes
        let (timestamp_delta, n) =
            read_varlong(body.get(at..).unwrap_or_default()).ok_or_else(|| bad("timestamp"))?;
        at += n;
        let timestamp_end = at;
        let (offset_delta, n) =
            read_varint(body.get(at..).unwrap_or_default()).ok_or_else(|| bad("offset"))?;
        at += n;
        let (key_len, n) =
            read_varint(body.get(at..).unwrap_or_default()).ok_or_else(|| bad("key length"))?;
        at += n;
        let key = match key_len {
            k if k < 0 => None,
            k => {
                let k = body.get(at..at + k as usize).ok_or_else(|| bad("key"))?;
                at += k.len();
                Some(k)
            }
        };
        let (value_len, _) =
            read_varint(body.get(at..).unwrap_or_default()).ok_or_else(|| bad("value length"))?;
        out.push(RecordRef {
            offset_delta: offset_delta as i32,
            timestamp_delta,
            key,
            is_tombstone: value_len < 0,
            body,
            timestamp_end,
        });
        pos = start + len;
    }
    Ok(out)
}

/// The indexes of the batch's records that have no key (Kafka refuses such records on
/// compacted topics). Fails if the records do not decompress or parse.
pub fn keyless_records(batch: &[u8], header: &BatchHeader) -> Result<Vec<i32>> {
    let plain = plain_records(batch, header)
        .ok_or_else(|| Error::CorruptMessage("record batch does not decompress".into()))?;
    Ok(parse_records(&plain, header.record_count)?
        .iter()
        .enumerate()
        .filter(|(_, r)| r.key.is_none())
        .map(|(i, _)| i as i32)
        .collect())
}

/// A copy of `batch` holding only `kept` (records of it, in order), with the same base
/// offset, last offset delta, producer fields and codec: the offsets of the records kept do
/// not change. With `delete_horizon`, the batch is marked with it (KIP-534) and the records'
/// timestamp deltas are re-based so their timestamps stay the same.
pub fn rebuild(
    batch: &[u8],
    header: &BatchHeader,
    kept: &[RecordRef<'_>],
    delete_horizon: Option<i64>,
) -> Result<Bytes> {
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
    let base_ts = delete_horizon.unwrap_or(header.base_timestamp);
    let mut plain = BytesMut::new();
    let mut body = Vec::new();
    for r in kept {
        let b = match base_ts == header.base_timestamp {
            true => r.body,
            false => {
                body.clear();
                body.push(r.body[0]);
                let ts = header.base_timestamp.wrapping_add(r.timestamp_delta);
                put_varlong(&mut body, ts.wrapping_sub(base_ts));
                body.extend_from_slice(&r.body[r.timestamp_end..]);
                &body
            }
        };
        let mut len = Vec::with_capacity(5);
        put_varlong(&mut len, b.len() as i64);
        plain.extend_from_slice(&len);
        plain.extend_from_slice(b);
    }
    let mut out = BytesMut::with_capacity(HEADER_BYTES + plain.len());
    out.extend_from_slice(&batch[..HEADER_BYTES]);
    let fill = |tmp: &mut BytesMut| {
        tmp.extend_from_slice(&plain);
        Ok(())
    };
    let compressed = match header.compression() {
        0 => {
            out.extend_from_slice(&plain);
            Ok(())
        }
        1 => Gzip::compress(&mut out, fill),
        2 => Snappy::compress(&mut out, fill),
        3 => Lz4::compress(&mut out, fill),
        4 => Zstd::compress(&mut out, fill),
        c => return Err(Error::UnsupportedCompressionType(c)),
    };
    compressed.map_err(|e| Error::Storage(format!("recompressing a cleaned batch: {e}")))?;
    let len = (out.len() - LOG_OVERHEAD) as i32;
    out[8..12].copy_from_slice(&len.to_be_bytes());
    let mut attributes = header.attributes;
    if delete_horizon.is_some() {
        attributes |= ATTR_DELETE_HORIZON;
    }
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    out[27..35].copy_from_slice(&base_ts.to_be_bytes());
    out[57..61].copy_from_slice(&(kept.len() as i32).to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

fn read_varlong(b: &[u8]) -> Option<(i64, usize)> {
    let mut value: u64 = 0;
    for (i, byte) in b.iter().take(10).enumerate() {
        value |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            let decoded = ((value >> 1) as i64) ^ -((value & 1) as i64);
            return Some((decoded, i + 1));
        }
    }
    None
}

fn read_varint(b: &[u8]) -> Option<(i64, usize)> {
    let (v, n) = read_varlong(b)?;
    if n > 5 {
        return None;
    }
    Some((v, n))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a valid uncompressed v2 batch of `values`, timestamps base_ts + i.
    pub fn batch(values: &[&[u8]], producer: Option<(i64, i16, i32)>, base_ts: i64) -> Vec<u8> {
        batch_with(values, producer, base_ts, 0)
    }

    /// The same batch, marked transactional.
    pub fn txn_batch(values: &[&[u8]], producer: (i64, i16, i32)) -> Vec<u8> {
        batch_with(values, Some(producer), 0, ATTR_TRANSACTIONAL)
    }

    fn batch_with(
        values: &[&[u8]],
        producer: Option<(i64, i16, i32)>,
        base_ts: i64,
        attributes: i16,
    ) -> Vec<u8> {
        let mut records = Vec::new();
        for (i, v) in values.iter().enumerate() {
            let mut body = vec![0u8];
            put_varlong(&mut body, i as i64); // timestamp delta
            put_varlong(&mut body, i as i64); // offset delta
            put_varlong(&mut body, -1); // null key
            put_varlong(&mut body, v.len() as i64);
            body.extend_from_slice(v);
            put_varlong(&mut body, 0); // no headers
            put_varlong(&mut records, body.len() as i64);
            records.extend_from_slice(&body);
        }
        let (pid, epoch, seq) = producer.unwrap_or((-1, -1, -1));
        let mut b = Vec::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes()); // length, patched below
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.push(2);
        b.extend_from_slice(&0u32.to_be_bytes()); // crc, patched below
        b.extend_from_slice(&attributes.to_be_bytes());
        b.extend_from_slice(&(values.len() as i32 - 1).to_be_bytes());
        b.extend_from_slice(&base_ts.to_be_bytes());
        b.extend_from_slice(&(base_ts + values.len() as i64 - 1).to_be_bytes());
        b.extend_from_slice(&pid.to_be_bytes());
        b.extend_from_slice(&epoch.to_be_bytes());
        b.extend_from_slice(&seq.to_be_bytes());
        b.extend_from_slice(&(values.len() as i32).to_be_bytes());
        b.extend_from_slice(&records);
        let len = (b.len() - LOG_OVERHEAD) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn control_batches_round_trip_and_clients_may_not_send_them() {
        for kind in [ControlType::Abort, ControlType::Commit] {
            let b = control_batch(42, 3, kind, 7, 1000);
            let h = BatchHeader::parse(&b).unwrap();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (42, 3, -1)
            );
            assert_eq!(
                (h.record_count, h.last_offset_delta, h.size),
                (1, 0, b.len())
            );
            assert_eq!(control_type(&b, &h), Some(kind));
            assert_eq!(marker_coordinator_epoch(&b, &h), Some(7));
            assert_eq!(h.crc, crc32c::crc32c(&b[CRC_START..]));
            assert!(matches!(
                validate_produced(&b, 1 << 20),
                Err(Error::InvalidRecord(_))
            ));
        }
        let data = batch(&[b"a"], Some((42, 3, 0)), 0);
        assert_eq!(
            control_type(&data, &BatchHeader::parse(&data).unwrap()),
            None
        );
    }

    #[test]
    fn valid_batch_passes_and_stamps() {
        let b = batch(&[b"a", b"bb", b"ccc"], Some((7, 0, 0)), 1000);
        let h = validate_produced(&b, 1_000_000).unwrap();
        assert_eq!(h.record_count, 3);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.producer_id, 7);
        assert_eq!(h.last_sequence(), 2);
        let s = stamp(&b, 42, 5, None);
        let h2 = validate_produced(&s, 1_000_000).unwrap();
        assert_eq!(h2.base_offset, 42);
        assert_eq!(h2.partition_leader_epoch, 5);
        let s = stamp(&b, 42, 5, Some(99));
        let h3 = validate_produced(&s, 1_000_000).unwrap();
        assert!(h3.is_log_append_time());
        assert_eq!(h3.max_timestamp, 99);
    }

    #[test]
    fn corrupt_batches_are_rejected_with_kafka_errors() {
        let good = batch(&[b"x"], None, 0);
        let mut bad_crc = good.clone();
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 0xff;
        assert!(matches!(
            validate_produced(&bad_crc, 1 << 20),
            Err(Error::CorruptMessage(_))
        ));
        assert!(matches!(
            validate_produced(&good[..30], 1 << 20),
            Err(Error::CorruptMessage(_))
        ));
        assert!(matches!(
            validate_produced(&good[..good.len() - 1], 1 << 20),
            Err(Error::CorruptMessage(_))
        ));
        let mut two = good.clone();
        two.extend_from_slice(&good);
        assert!(matches!(
            validate_produced(&two, 1 << 20),
            Err(Error::InvalidRecord(_))
        ));
        let mut wrong_count = good.clone();
        wrong_count[57..61].copy_from_slice(&5i32.to_be_bytes());
        let crc = crc32c::crc32c(&wrong_count[CRC_START..]);
        wrong_count[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_produced(&wrong_count, 1 << 20),
            Err(Error::InvalidRecord(_))
        ));
        let mut magic1 = good.clone();
        magic1[16] = 1;
        assert!(matches!(
            validate_produced(&magic1, 1 << 20),
            Err(Error::InvalidRecord(_))
        ));
        assert!(matches!(
            validate_produced(&good, 10),
            Err(Error::MessageTooLarge { .. })
        ));
        let mut neg = good.clone();
        neg[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(matches!(
            validate_produced(&neg, 1 << 20),
            Err(Error::CorruptMessage(_))
        ));
        assert!(validate_produced(&[], 1 << 20).is_err());
    }

    #[test]
    fn timestamps_inside_a_batch() {
        let b = batch(&[b"a", b"b", b"c"], None, 1000);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(find_timestamp_in_batch(&b, &h, 1001), Some((1, 1001)));
        assert_eq!(find_timestamp_in_batch(&b, &h, 5000), None);
        assert_eq!(max_timestamp_record(&b, &h), Some((2, 1002)));
    }

    #[test]
    fn decompression_stops_at_its_limit() {
        use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
        let plain = vec![0u8; 100 << 10];
        let fill = |b: &mut BytesMut| {
            b.extend_from_slice(&plain);
            Ok(())
        };
        for codec in 1..=4u8 {
            let mut c = BytesMut::new();
            match codec {
                1 => Gzip::compress(&mut c, fill),
                2 => Snappy::compress(&mut c, fill),
                3 => Lz4::compress(&mut c, fill),
                _ => Zstd::compress(&mut c, fill),
            }
            .unwrap();
            assert!(c.len() < plain.len() / 10, "codec {codec}");
            assert_eq!(decompress(codec, &c, plain.len()), Some(plain.clone()));
            assert_eq!(
                decompress(codec, &c, plain.len() - 1),
                None,
                "codec {codec}"
            );
        }
    }

    #[test]
    fn snappy_length_claims_beyond_the_limit_or_the_data_are_refused() {
        // A raw snappy block claiming 4 GiB (varint ff ff ff ff 0f), then one literal byte.
        let raw: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, b'x'];
        assert_eq!(decompress(2, raw, PLAIN_RECORDS_MAX), None);
        // The same block inside xerial's framing.
        let mut framed = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        framed.extend_from_slice(&(raw.len() as u32).to_be_bytes());
        framed.extend_from_slice(raw);
        assert_eq!(decompress(2, &framed, PLAIN_RECORDS_MAX), None);
        // A frame whose length runs past the data.
        framed.truncate(16);
        framed.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(decompress(2, &framed, PLAIN_RECORDS_MAX), None);
    }

    #[test]
    fn timestamps_inside_compressed_batches() {
        use kafka_protocol::records::{
            Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
        };
        let records: Vec<Record> = (0..50i64)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i,
                // the encoder keeps records in one batch while offset - sequence is constant
                sequence: i as i32,
                // out of order on purpose: the largest is not the last
                timestamp: 1000 + if i == 20 { 500 } else { i },
                key: None,
                value: Some(Bytes::from(vec![b'v'; 100])),
                headers: Default::default(),
            })
            .collect();
        for compression in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut buf = BytesMut::new();
            let options = RecordEncodeOptions {
                version: 2,
                compression,
            };
            RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
            let h = validate_produced(&buf, 1 << 20).unwrap();
            assert_ne!(h.compression(), 0, "{compression:?}");
            assert_eq!(
                find_timestamp_in_batch(&buf, &h, 1010),
                Some((10, 1010)),
                "{compression:?}"
            );
            // the first record in offset order whose timestamp is at least the target
            assert_eq!(
                find_timestamp_in_batch(&buf, &h, 1030),
                Some((20, 1500)),
                "{compression:?}"
            );
            assert_eq!(
                max_timestamp_record(&buf, &h),
                Some((20, 1500)),
                "{compression:?}"
            );
            // a corrupt compressed body answers nothing rather than garbage
            let mut bad = buf.to_vec();
            for b in &mut bad[HEADER_BYTES..] {
                *b = 0xAB;
            }
            assert_eq!(
                find_timestamp_in_batch(&bad, &h, 1030),
                None,
                "{compression:?}"
            );
        }
    }

    #[test]
    fn sequence_wraps() {
        let mut b = batch(&[b"a", b"b"], Some((1, 0, i32::MAX)), 0);
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.last_sequence(), 0);
    }

    /// A batch whose record count claims far more records than its bytes hold is refused
    /// without reserving memory for the claim (the count is the sender's word).
    #[test]
    fn a_record_count_beyond_the_bytes_reserves_nothing_for_it() {
        let b = batch(&[b"a"], None, 0);
        let mut h = BatchHeader::parse(&b).unwrap();
        h.record_count = i32::MAX;
        assert!(parse_records(&b[HEADER_BYTES..], i32::MAX).is_err());
        assert!(keyless_records(&b, &h).is_err());
    }

    /// Found by fuzzing a follower's fetch answers: a batch whose last offset would overflow
    /// is corrupt, not a batch to skip or to wrap the log end offset with.
    #[test]
    fn offsets_that_overflow_are_corrupt() {
        let mut b = batch(&[b"a", b"b"], None, 0);
        b[0..8].copy_from_slice(&(i64::MAX - 1).to_be_bytes());
        assert!(matches!(
            BatchHeader::parse(&b),
            Err(Error::CorruptMessage(_))
        ));
        b[0..8].copy_from_slice(&(i64::MAX - 2).to_be_bytes());
        assert_eq!(BatchHeader::parse(&b).unwrap().last_offset(), i64::MAX - 1);
        // A negative last offset delta, under a base offset near i64::MIN (finding 8).
        b[0..8].copy_from_slice(&(i64::MIN + 1).to_be_bytes());
        b[23..27].copy_from_slice(&(-2i32).to_be_bytes());
        assert!(matches!(
            BatchHeader::parse(&b),
            Err(Error::CorruptMessage(_))
        ));
    }
}
