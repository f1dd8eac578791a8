//! The two things every budget, quota and buffer counts — records and bytes — and a value
//! for each of them ([`PerDimension`]).
//!
//! Why a type of its own: "records and bytes" used to be written out as a pair of fields, a
//! pair of arguments or a tuple in every layer, and each new kind of limit wrote the pair out
//! again. A limit now says what it does for one [`Dimension`], and [`PerDimension`] carries
//! it for both (`charge[d]`, `spec[d]`, [`Dimension::ALL`]).
//!
//! Layer: foundations. Imports nothing of floodgate's.

use std::ops::{Index, IndexMut};

use serde::{Deserialize, Serialize};

/// Which of the two counts a limit is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dimension {
    Records,
    Bytes,
}

impl Dimension {
    pub const ALL: [Dimension; 2] = [Dimension::Records, Dimension::Bytes];

    /// The dimension's name in keys, reasons and fields (`records_per_sec`,
    /// `tenant_records`, `"tenant-records"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Dimension::Records => "records",
            Dimension::Bytes => "bytes",
        }
    }
}

/// A value for each dimension. Its fields keep their names (`records`, `bytes`) in code and
/// on every wire; indexing by [`Dimension`] is for code that does the same for both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PerDimension<T> {
    pub records: T,
    pub bytes: T,
}

impl<T> PerDimension<T> {
    /// The value of each dimension, made by `f`.
    pub fn from_fn(mut f: impl FnMut(Dimension) -> T) -> Self {
        Self {
            records: f(Dimension::Records),
            bytes: f(Dimension::Bytes),
        }
    }

    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerDimension<U> {
        PerDimension {
            records: f(self.records),
            bytes: f(self.bytes),
        }
    }

    /// Each dimension with its value, records first.
    pub fn iter(&self) -> impl Iterator<Item = (Dimension, &T)> {
        [
            (Dimension::Records, &self.records),
            (Dimension::Bytes, &self.bytes),
        ]
        .into_iter()
    }
}

impl<T> Index<Dimension> for PerDimension<T> {
    type Output = T;

    fn index(&self, d: Dimension) -> &T {
        match d {
            Dimension::Records => &self.records,
            Dimension::Bytes => &self.bytes,
        }
    }
}

impl<T> IndexMut<Dimension> for PerDimension<T> {
    fn index_mut(&mut self, d: Dimension) -> &mut T {
        match d {
            Dimension::Records => &mut self.records,
            Dimension::Bytes => &mut self.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dimension_reads_and_writes_its_own_field() {
        let mut v = PerDimension::from_fn(|d| d.as_str().len());
        assert_eq!((v[Dimension::Records], v[Dimension::Bytes]), (7, 5));
        v[Dimension::Bytes] += 1;
        assert_eq!(
            v,
            PerDimension {
                records: 7,
                bytes: 6
            }
        );
        let seen: Vec<_> = v.iter().map(|(d, n)| (d, *n)).collect();
        assert_eq!(seen, [(Dimension::Records, 7), (Dimension::Bytes, 6)]);
        assert_eq!(v.map(|n| n * 2).bytes, 12);
    }

    #[test]
    fn its_wire_shape_is_the_two_named_fields() {
        let v = PerDimension {
            records: 1,
            bytes: 2,
        };
        assert_eq!(
            serde_json::to_string(&v).expect("serialises"),
            r#"{"records":1,"bytes":2}"#
        );
    }
}
