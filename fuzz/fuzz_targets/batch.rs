//! The record-batch parser and validator, every codec: a produced record set is validated as
//! the produce path does, then stamped, searched by timestamp, checked for keyless records
//! (compacted topics) and, uncompressed, rebuilt as the cleaner does; stored log bytes are
//! split into batches and read as transaction markers. The first input byte picks fix-ups
//! the fuzzer cannot make by itself: bit 0 sets the batch length to the input's, bit 1 sets
//! a CRC-32C that matches.
#![no_main]

use cairn::log::batch::{
    control_type, find_timestamp_in_batch, headers, keyless_records, marker_coordinator_epoch,
    max_timestamp_record, parse_records, rebuild, stamp, validate_produced, BatchHeader,
    HEADER_BYTES, LOG_OVERHEAD,
};
use libfuzzer_sys::fuzz_target;

/// The broker's allocator, so memory behaves as in the broker.
#[global_allocator]
static GLOBAL: cairn::allocator::Allocator = cairn::allocator::Allocator;

const MAX_MESSAGE_BYTES: i32 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&fixes, rest)) = data.split_first() else {
        return;
    };
    let mut b = rest.to_vec();
    if b.len() >= HEADER_BYTES {
        if fixes & 1 != 0 {
            let len = (b.len() - LOG_OVERHEAD) as i32;
            b[8..12].copy_from_slice(&len.to_be_bytes());
        }
        if fixes & 2 != 0 {
            let crc = crc32c::crc32c(&b[21..]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
        }
    }
    if let Ok(h) = validate_produced(&b, MAX_MESSAGE_BYTES) {
        produced(&b, &h);
    }
    let mut at = 0usize;
    for h in headers(&b) {
        let batch = &b[at..at + h.size];
        at += h.size;
        let _ = control_type(batch, &h);
        let _ = marker_coordinator_epoch(batch, &h);
        let _ = max_timestamp_record(batch, &h);
    }
});

fn produced(b: &[u8], h: &BatchHeader) {
    let stamped = stamp(b, 42, 7, Some(1_700_000_000_000));
    let again =
        validate_produced(&stamped, MAX_MESSAGE_BYTES).expect("a stamped batch stays valid");
    assert_eq!((again.base_offset, again.partition_leader_epoch), (42, 7));
    let _ = find_timestamp_in_batch(b, h, 0);
    let _ = max_timestamp_record(b, h);
    let _ = keyless_records(b, h);
    if h.compression() == 0 {
        if let Ok(records) = parse_records(&b[HEADER_BYTES..], h.record_count) {
            let kept: Vec<_> = records.iter().copied().step_by(2).collect();
            if let Ok(rebuilt) = rebuild(b, h, &kept, Some(h.base_timestamp.wrapping_add(1))) {
                let r = BatchHeader::parse(&rebuilt).expect("a rebuilt batch parses");
                assert_eq!(r.base_offset, h.base_offset);
                assert_eq!(r.last_offset_delta, h.last_offset_delta);
            }
        }
    }
}
