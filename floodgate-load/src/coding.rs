//! `--content-encoding`: a body coded once, as a producer's library would code it.

use std::io::Write as _;

use bytes::Bytes;

/// `body` in `encoding` (`identity` leaves it as it is).
pub fn encode(encoding: &str, body: &[u8]) -> Result<Bytes, String> {
    let failed = |e: std::io::Error| format!("{encoding}: {e}");
    let coded = match encoding {
        "identity" => body.to_vec(),
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(body).map_err(failed)?;
            e.finish().map_err(failed)?
        }
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(body).map_err(failed)?;
            e.finish().map_err(failed)?
        }
        "zstd" => {
            let mut out = Vec::with_capacity(zstd_safe::compress_bound(body.len()));
            zstd_safe::compress(&mut out, body, 3)
                .map_err(|code| format!("zstd: {}", zstd_safe::get_error_name(code)))?;
            out
        }
        "snappy" => {
            let mut e = snap::write::FrameEncoder::new(Vec::new());
            e.write_all(body).map_err(failed)?;
            e.into_inner().map_err(|e| format!("snappy: {e}"))?
        }
        other => {
            return Err(format!(
                "--content-encoding {other:?}: use identity, gzip, deflate, zstd or snappy"
            ))
        }
    };
    Ok(Bytes::from(coded))
}
