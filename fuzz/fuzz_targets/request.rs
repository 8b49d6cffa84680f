//! A whole request's way through the broker: header, the body decoder of the API and version
//! the frame names (every API in the dispatch table), and its handler, on a single-node
//! broker over the in-memory store with its metadata quorum of one. Every frame gets an
//! answer, no answer (acks=0) or a closed connection; none panics. The clock is paused, so
//! long-polling fetches end at once.
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use cairn::broker::Broker;
use cairn::dispatch::{handle, APIS};
use cairn::handlers::Connection;
use cairn::storage::memory::MemoryStore;
use cairn::topics::LogDir;
use libfuzzer_sys::fuzz_target;

/// The broker's allocator, so memory behaves as in the broker.
#[global_allocator]
static GLOBAL: cairn::allocator::Allocator = cairn::allocator::Allocator;
use tokio::runtime::Runtime;

struct World {
    rt: Runtime,
    broker: Arc<Broker>,
    conn: Connection,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let dir = std::env::temp_dir().join(format!("cairn-fuzz-request-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let config =
            cairn::config::Config::load(None, Vec::new(), &[format!("log.dirs={}", dir.display())])
                .unwrap();
        let store = Arc::new(MemoryStore::default());
        let dirs = vec![LogDir::new(config.log_dirs[0].clone(), store.clone())];
        let broker =
            Broker::with_stores(config, APIS, store.clone(), dirs, store, Vec::new()).unwrap();
        rt.block_on(async {
            let dial = cairn::dial::Dialer::new(&broker.config).unwrap();
            let cluster = broker.start_cluster(None, dial, None).await.unwrap();
            cluster.await_running().await;
            broker.auto_create("t").await.unwrap();
        });
        let conn = Connection::new(
            "PLAINTEXT".into(),
            "127.0.0.1:1".parse().unwrap(),
            "User:ANONYMOUS".into(),
            None,
        );
        World { rt, broker, conn }
    })
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    w.rt.block_on(async {
        let _ = handle(&w.broker, &w.conn, Bytes::copy_from_slice(data)).await;
    });
});
