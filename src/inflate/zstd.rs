//! zstd: libzstd's streaming decoder (`ZSTD_decompressStream`), one or more frames, skippable
//! frames skipped. The window a frame asks for is what the decoder allocates, so it is capped
//! ([`ZSTD_WINDOW_LOG_MAX`]); what the decoder really holds is read back after every step
//! (`ZSTD_sizeof_DCtx`) and charged by the caller.

use zstd_safe::{DCtx, DParameter, InBuffer, OutBuffer};

use super::ZSTD_WINDOW_LOG_MAX;

pub(super) struct Zstd {
    /// Made at the first byte, so a body refused before it is read never allocates one.
    dctx: Option<DCtx<'static>>,
    /// A frame has begun and not ended yet (its last block decoded and flushed).
    in_frame: bool,
}

impl Zstd {
    pub(super) fn new() -> Self {
        Self {
            dctx: None,
            in_frame: false,
        }
    }

    pub(super) fn step(&mut self, input: &[u8], out: &mut [u8]) -> Result<(usize, usize), String> {
        if input.is_empty() && !self.in_frame {
            return Ok((0, 0));
        }
        let dctx = match &mut self.dctx {
            Some(dctx) => dctx,
            None => {
                let mut dctx = DCtx::try_create().ok_or("no memory for a zstd decoder")?;
                dctx.set_parameter(DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX))
                    .map_err(|code| zstd_safe::get_error_name(code).to_string())?;
                self.dctx.insert(dctx)
            }
        };
        let mut input = InBuffer::around(input);
        let mut output = OutBuffer::around(out);
        let hint = dctx
            .decompress_stream(&mut output, &mut input)
            .map_err(|code| {
                let name = zstd_safe::get_error_name(code);
                if name.contains("memory") || name.contains("indow") {
                    format!(
                        "{name} (frames are decoded with a window of at most {} MiB)",
                        (1u32 << ZSTD_WINDOW_LOG_MAX) >> 20
                    )
                } else {
                    name.to_string()
                }
            })?;
        let (used, wrote) = (input.pos(), output.pos());
        if used > 0 || wrote > 0 {
            // 0: the frame is decoded and flushed; anything else, more is to come.
            self.in_frame = hint != 0;
        }
        Ok((used, wrote))
    }

    /// Every frame begun has ended (or none began: an empty body).
    pub(super) fn finished(&self) -> bool {
        !self.in_frame
    }

    pub(super) fn memory(&self) -> usize {
        self.dctx.as_ref().map_or(0, DCtx::sizeof)
    }
}
