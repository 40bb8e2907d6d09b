//! Feeds arbitrary bytes to the schema loader, split into up to three files.
//! Run with `cargo +nightly fuzz run schema_loader` (from `fuzz/`'s parent).
#![no_main]

use gatehouse_schema::{load_sources, Source};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let sources: Vec<Source> = text
        .split('\u{1}')
        .take(3)
        .enumerate()
        .map(|(i, t)| Source {
            path: format!("f{i}.graphql"),
            text: t.to_string(),
        })
        .collect();
    let _ = load_sources(&sources);
});
