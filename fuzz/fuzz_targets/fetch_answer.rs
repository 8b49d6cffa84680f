//! A follower's handling of its leader's Fetch answers (v12, as the fetcher asks): the
//! response header and body decoded as the fetcher decodes them, then applied to a log over
//! the in-memory store as the fetcher applies them (truncation on divergence or an offset
//! out of range, appending the batches, the HW). No answer panics the follower.
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use cairn::log::PartitionLog;
use cairn::replication::apply_answer;
use cairn::storage::memory::MemoryStore;
use cairn::storage::LogStore;
use cairn::wire::decode_response;
use kafka_protocol::messages::{ApiKey, FetchResponse};
use libfuzzer_sys::fuzz_target;

/// The broker's allocator, so memory behaves as in the broker.
#[global_allocator]
static GLOBAL: cairn::allocator::Allocator = cairn::allocator::Allocator;
use tokio::runtime::Runtime;

fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(resp) =
        decode_response::<FetchResponse>(ApiKey::Fetch, 12, 1, Bytes::copy_from_slice(data))
    else {
        return;
    };
    let store = Arc::new(MemoryStore::default());
    let log = PartitionLog::open(1, store as Arc<dyn LogStore>, 0).unwrap();
    runtime().block_on(async {
        apply_answer(resp, |topic, index| {
            (topic == "t" && index == 0).then_some(&log)
        })
        .await;
    });
    let o = log.offsets();
    assert!(o.log_start <= o.log_end, "{o:?}");
});
