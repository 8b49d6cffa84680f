//! The controller listener's messages: a 4-byte length and a JSON body, read as a voter
//! reads other voters' Raft RPCs and brokers' requests, and as a broker or voter reads the
//! answers. Any bytes are a message or an error, never a panic, and a length prefix is not
//! memory until its bytes arrive.
#![no_main]

use cairn::controller::network::{read_frame, Reply, Rpc};
use libfuzzer_sys::fuzz_target;

/// The broker's allocator, so memory behaves as in the broker.
#[global_allocator]
static GLOBAL: cairn::allocator::Allocator = cairn::allocator::Allocator;

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut requests = data;
        while read_frame::<Rpc>(&mut requests).await.is_ok() {}
        let mut replies = data;
        while read_frame::<Reply>(&mut replies).await.is_ok() {}
    });
});
