//! How much of a client's own input an answer may quote. Error details name the record and
//! field at fault, and often quote what was sent (a serde error quotes an unknown field's
//! name, a schema error the value); a stored `Idempotency-Key` answer keeps them for a day. A
//! client choosing its own 80 KB field names must not make each answer it gets, or stores,
//! that large, so every detail is cut here to a size that does not depend on the input.
//!
//! Layer: foundations. Imports nothing of floodgate's; used by the body decoders, the schema
//! step and the outcome room.

/// Most bytes of a value an error quotes (a `type` error quoted a whole 800 KB string).
pub const MAX_QUOTE: usize = 200;
/// Most bytes of an error's detail (the value it quotes, and the words around it).
pub const MAX_DETAIL: usize = 1024;

/// `text` cut to at most `max` bytes, at a character boundary.
pub fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A detail cut to [`MAX_DETAIL`] bytes, saying how long it was: at most `MAX_DETAIL` + 24
/// bytes whatever the input.
pub fn brief(detail: String) -> String {
    if detail.len() <= MAX_DETAIL {
        return detail;
    }
    format!("{}… ({} bytes)", clip(&detail, MAX_DETAIL), detail.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_detail_is_cut_at_a_character_boundary_and_says_its_length() {
        let long = format!("unknown field `{}`", "é".repeat(50_000));
        let cut = brief(long.clone());
        assert!(cut.len() <= MAX_DETAIL + 24, "{} bytes", cut.len());
        assert!(cut.ends_with(&format!("… ({} bytes)", long.len())), "{cut}");
        assert_eq!(brief("short".into()), "short");
    }
}
