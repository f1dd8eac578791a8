#![no_main]
//! Any bytes, either format: the parser answers Ok or Err, never panics, never loops.

use floodgate::body::{parse, Format};
use floodgate::config::RequestBounds;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = RequestBounds::default();
    for format in [Format::Json, Format::Ndjson] {
        if let Ok(records) = parse(format, data, &limits) {
            for r in &records.records() {
                let _ = r.size();
            }
        }
    }
});
