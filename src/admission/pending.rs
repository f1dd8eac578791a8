//! `[wait]`'s part in the checks: a refusal a hold could cover waits until every other check
//! has spoken, so a request is never held only to be refused for something else.

use super::Admission;
use crate::refusal::Refusal;

/// A check's refusals that `[wait]` could hold ([`Admission::holdable`]), kept while the
/// checks after them run: the first refusal a hold cannot change is the answer at once; a
/// holdable one is the answer only once every other check has passed, and its caller decides
/// whether the request may wait for it (a seat) or hears it as a 429.
#[derive(Debug, Default)]
pub(super) struct Pending(Option<Refusal>);

impl Pending {
    /// `refusal`, at once unless a hold covers it; kept otherwise (the longest wait).
    pub(super) fn add(&mut self, admission: &Admission, refusal: Refusal) -> Result<(), Refusal> {
        if !admission.holdable(&refusal) {
            return Err(refusal);
        }
        match &mut self.0 {
            Some(kept) => kept.retry_after = kept.retry_after.max(refusal.retry_after),
            None => self.0 = Some(refusal),
        }
        Ok(())
    }

    pub(super) fn is_some(&self) -> bool {
        self.0.is_some()
    }

    /// The holdable refusal kept, if any, once every other check has passed.
    pub(super) fn finish(self) -> Result<(), Refusal> {
        self.0.map_or(Ok(()), Err)
    }
}
