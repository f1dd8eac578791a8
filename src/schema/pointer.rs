//! A JSON pointer (RFC 6901) built while walking a value, for errors that name the field.

use std::fmt;

#[derive(Debug, Clone, Default)]
pub struct Pointer(Vec<String>);

impl Pointer {
    pub fn push(&mut self, key: &str) {
        self.0.push(key.replace('~', "~0").replace('/', "~1"));
    }

    pub fn push_index(&mut self, i: usize) {
        self.0.push(i.to_string());
    }

    pub fn pop(&mut self) {
        self.0.pop();
    }

    /// A pointer from serde_path_to_error's path (`a.b[2].c`), whose segments are the keys
    /// and indexes a deserializer went through.
    pub fn from_path(path: &serde_path_to_error::Path) -> Self {
        use serde_path_to_error::Segment;
        let mut p = Self::default();
        for segment in path.iter() {
            match segment {
                Segment::Seq { index } => p.push_index(*index),
                Segment::Map { key } => p.push(key),
                Segment::Enum { variant } => p.push(variant),
                Segment::Unknown => {}
            }
        }
        p
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for segment in &self.0 {
            write!(f, "/{segment}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_escaped() {
        let mut p = Pointer::default();
        assert_eq!(p.to_string(), "");
        p.push("a/b");
        p.push_index(3);
        p.push("m~n");
        assert_eq!(p.to_string(), "/a~1b/3/m~0n");
    }
}
