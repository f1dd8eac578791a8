#![no_main]
//! Any bytes, every framing: the decoder answers Ok or Err, never panics, never loops — `/v1`'s
//! two formats, Confluent v2's envelope with its side fields, and a v3 batch that notes failed
//! entries instead of failing.

use floodgate::body::{Decoder, Framing};
use floodgate::config::RequestBounds;
use floodgate::http::confluent::record::{V2Format, V2Record, V3Record, V2_FRAMING};
use floodgate::http::v1::{parse, Format};
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
    // Cut in two, so values left open at a chunk's end are followed too.
    let cut = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let (a, b) = data.split_at(cut);
    let v2 = V2Record::new(V2Format::Json, None);
    let mut decoder = Decoder::new(V2_FRAMING, &v2, &limits);
    if decoder.push(a).and_then(|_| decoder.push(b)).is_ok() {
        let _ = decoder.finish();
    }
    let _ = v2.take_side();
    let v3 = V3Record::batch();
    let mut decoder = Decoder::new(Framing::Envelope("entries"), &v3, &limits);
    if decoder.push(a).and_then(|_| decoder.push(b)).is_ok() {
        let _ = decoder.finish();
    }
    let _ = v3.take_seen();
});
