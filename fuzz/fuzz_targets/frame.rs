//! The frame reader: any byte stream yields frames no longer than the limit, an error, or
//! the end; never a panic, and never memory for a length whose bytes did not arrive.
#![no_main]

use cairn::wire::frame::FrameReader;
use libfuzzer_sys::fuzz_target;

/// The broker's allocator, so memory behaves as in the broker.
#[global_allocator]
static GLOBAL: cairn::allocator::Allocator = cairn::allocator::Allocator;

/// Small, so lengths around and over it are within the fuzzer's reach.
const FRAME_BYTES_MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut frames = FrameReader::new(data, FRAME_BYTES_MAX);
        let mut read = 0usize;
        while let Ok(Some(frame)) = frames.next().await {
            assert!(frame.len() <= FRAME_BYTES_MAX);
            read += 4 + frame.len();
            assert!(read <= data.len(), "more frame bytes than were sent");
        }
    });
});
