//! Confluent REST Proxy compatibility, so existing producers can switch by changing a URL: the
//! whole wire format in one folder.
//!
//! - [`record`]: its record shapes (v2's and v3's), parsed into the shared decoder
//!   ([`crate::body::Decoder`]) through [`crate::body::ParseRecord`].
//! - [`answers`]: the pipeline's outcomes in Confluent's shapes (`{"error_code", "message"}`,
//!   v2's produce answer, v3's delivery reports and batch answers).
//! - [`v2`] and [`v3`] (with `v3::stream`): the routes' adapters on the ingest pipeline.
//!
//! Layer: HTTP edges. Imports the app state, the pipeline, the outcome room and the decoder.

pub mod answers;
pub mod record;
pub mod v2;
pub mod v3;
