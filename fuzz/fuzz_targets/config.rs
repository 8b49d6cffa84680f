//! The configuration as `cairn [file] [--override k=v]...` and `KAFKA_*` variables give it:
//! `server.properties` text, environment variables and overrides, separated in the input
//! by NUL bytes (text, then `VAR=value` lines, then one override per line). Any input is
//! either a config or a readable error, never a panic.
#![no_main]

use cairn::config::{env_key, parse_properties, Config};
use libfuzzer_sys::fuzz_target;

/// The broker's allocator, so memory behaves as in the broker.
#[global_allocator]
static GLOBAL: cairn::allocator::Allocator = cairn::allocator::Allocator;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\0');
    let properties = parts.next().unwrap_or_default();
    let env: Vec<(String, String)> = parts
        .next()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let overrides: Vec<String> = parts
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    for (var, _) in &env {
        let _ = env_key(var);
    }
    let mut props = parse_properties(properties);
    // Never touch this machine's directories: the data dir is a path that is not made.
    props.insert("log.dirs".into(), "/nonexistent/cairn-fuzz".into());
    if let Ok(config) = Config::from_props(props.clone()) {
        for l in &config.listeners {
            let _ = l.bind_addr();
        }
    }
    let overrides: Vec<String> = overrides
        .into_iter()
        .chain(props.iter().map(|(k, v)| format!("{k}={v}")))
        .collect();
    let _ = Config::load(None, env, &overrides);
});
