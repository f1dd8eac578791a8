//! The names a schema declares or refers to, bounded before its parser sees them. The parsers
//! copy a name once per scope it may be resolved in, so their cost grows with a name's length
//! times its parts, not with the text's size. A review of #37 measured, with names of 90–258
//! KB: one Protobuf `package` of ~45,000 parts kept 1.9 GiB while its descriptor pool was
//! built (every prefix of the package is a name); relative type references under it took 170 s
//! of CPU (each resolved in every enclosing scope); an Avro namespace of 150 KB shared by 1,300
//! named types took 12 s and 1.1 GiB (every full name a copy of it). Real names are tens of
//! bytes and a few parts, so a name past these bounds is refused as invalid, and the
//! parsers' work is at most the text's size times [`MAX_NAME_BYTES`] × [`MAX_NAME_PARTS`].

use std::fmt::Display;

use crate::quote::{clip, MAX_QUOTE};

/// Most bytes of a full name (a named type's with its namespace or package, a field's, an
/// enum symbol's, a reference's).
pub const MAX_NAME_BYTES: usize = 512;
/// Most dot-separated parts of a full name: a relative reference is tried in each enclosing
/// scope, one candidate per part.
pub const MAX_NAME_PARTS: usize = 16;

/// A full name's size (bytes and parts), built up scope by scope without copying it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Extent {
    bytes: usize,
    parts: usize,
}

impl Extent {
    /// A name as written (relative or full; a leading dot, Protobuf's mark of a full name, is
    /// not a part).
    pub(super) fn of(name: &str) -> Self {
        let name = name.strip_prefix('.').unwrap_or(name);
        if name.is_empty() {
            return Self::default();
        }
        Self {
            bytes: name.len(),
            parts: name.split('.').count(),
        }
    }

    /// `name` inside this scope.
    pub(super) fn join(self, name: &str) -> Self {
        let inner = Self::of(name);
        if self.parts == 0 {
            return inner;
        }
        Self {
            bytes: self.bytes.saturating_add(1).saturating_add(inner.bytes),
            parts: self.parts.saturating_add(inner.parts),
        }
    }

    /// This extent, or why `what` (the name, quoted at most [`MAX_QUOTE`] bytes) is refused.
    pub(super) fn within(self, what: impl Display, name: &str) -> Result<Self, String> {
        let quoted = clip(name, MAX_QUOTE);
        if self.bytes > MAX_NAME_BYTES {
            return Err(format!(
                "{what} `{quoted}` makes a full name of {} bytes; at most {MAX_NAME_BYTES}",
                self.bytes
            ));
        }
        if self.parts > MAX_NAME_PARTS {
            return Err(format!(
                "{what} `{quoted}` makes a full name of {} dot-separated parts; at most {MAX_NAME_PARTS}",
                self.parts
            ));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_name_counts_its_scopes_bytes_and_parts() {
        let package = Extent::of(".a.bc");
        assert_eq!(package, Extent { bytes: 4, parts: 2 });
        assert_eq!(package.join("D"), Extent { bytes: 6, parts: 3 });
        assert_eq!(Extent::default().join("x.y"), Extent::of("x.y"));
        assert_eq!(Extent::of(""), Extent::default());
        let long = "p.".repeat(MAX_NAME_PARTS);
        let e = Extent::of(long.trim_end_matches('.'))
            .join("M")
            .within("message", "M")
            .expect_err("too many parts");
        assert!(e.contains("17 dot-separated parts; at most 16"), "{e}");
        let e = Extent::of(&"n".repeat(MAX_NAME_BYTES))
            .join("M")
            .within("message", "M")
            .expect_err("too long");
        assert!(e.contains("514 bytes; at most 512"), "{e}");
        let quoted = "q".repeat(10_000);
        let e = Extent::of(&quoted)
            .within("package", &quoted)
            .expect_err("too long");
        assert!(
            e.len() < MAX_QUOTE + 200,
            "the name is quoted clipped: {}",
            e.len()
        );
    }
}
