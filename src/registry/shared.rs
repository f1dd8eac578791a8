//! The shared registry's rules, apart from Kafka itself: which entries a change writes, how an
//! entry applies to the state (the same way on every replica), and what is remembered of it
//! for the admin API's audit list and for the replica that wrote it.

mod apply;
mod entries;
mod replica;
#[cfg(test)]
mod tests;

pub use apply::{is_echo, Applier, Rejection};
pub use entries::{entries, rewrite};
pub use replica::{value_of, AuditEntry, SharedRegistry, INVALID, SKIPPED, STALE};
