//! The raw snappy reader against snap's own: valid blocks read the same, broken ones refused
//! by both (or read the same by both).

use super::*;

/// xorshift: reproducible noise without a dependency.
pub(super) fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn the_raw_snappy_reader_agrees_with_snap_on_valid_and_broken_blocks() {
    let mut samples: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"a".to_vec(),
        vec![7u8; 100_000],
        records(2000),
        noise(3, 70_000),
    ];
    // Short periods: copies that overlap what they write.
    samples.push((0..50_000u32).map(|i| (i % 3) as u8).collect());
    samples.push((0..50_000u32).map(|i| (i % 61) as u8).collect());
    let mut decoder = snap::raw::Decoder::new();
    for (s, sample) in samples.iter().enumerate() {
        let block = snappy_raw(sample);
        let (ours, _) = inflate(codings("snappy"), limits(), &block, 513).expect("valid");
        assert!(ours == *sample, "sample {s}");
        // Broken copies of it: both readers refuse, or both read the same bytes.
        let flips = noise(s as u64 + 11, 400);
        for pair in flips.chunks(2).take(200) {
            let mut broken = block.clone();
            if broken.is_empty() {
                break;
            }
            let at = usize::from(pair[0]) * broken.len() / 256;
            broken[at] ^= pair[1] | 1;
            let theirs = decoder.decompress_vec(&broken);
            let mine = inflate(codings("snappy"), limits(), &broken, 97);
            match (&theirs, &mine) {
                (Ok(a), Ok((b, _))) => assert!(a == b, "sample {s}, byte {at}"),
                (Err(_), Err(_)) => {}
                _ => panic!(
                    "sample {s}, byte {at}: snap {:?}, ours {:?}",
                    theirs.as_ref().map(Vec::len),
                    mine.as_ref().map(|m| m.0.len())
                ),
            }
        }
    }
}
