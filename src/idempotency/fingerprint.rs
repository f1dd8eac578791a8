//! A request's fingerprint: what must be the same for a retry to be the same request — the
//! tenant, the method, the path (topic, partition, cluster), what the query and headers change
//! (the acknowledgement asked for, the content type) and the body, hashed as it arrives.
//!
//! SHA-256 over length-prefixed fields then the body bytes: the body is hashed chunk by chunk
//! while it is decoded (no copy kept), and a retry's body is hashed without being decoded.

use sha2::{Digest as _, Sha256};

/// The hash of a request: equal for the same request sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

/// A fingerprint being computed while the body arrives.
#[derive(Debug, Clone)]
pub struct Fingerprinter {
    sha: Sha256,
    /// Set once the body's last byte went in: only then does the fingerprint stand for it.
    complete: bool,
}

/// What, besides the body, makes a request what it is.
#[derive(Debug, Clone, Copy)]
pub struct RequestShape<'a> {
    pub tenant: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    /// The acknowledgement asked for (`?async=true` or not), normalised by the adapter.
    pub ack: &'a str,
    pub content_type: &'a [u8],
}

impl Fingerprinter {
    pub fn new(shape: RequestShape<'_>) -> Self {
        let mut sha = Sha256::new();
        sha.update(b"floodgate request\0");
        for field in [shape.tenant, shape.method, shape.path, shape.ack] {
            sha.update((field.len() as u64).to_be_bytes());
            sha.update(field.as_bytes());
        }
        // `application/JSON` and `application/json` mean the same (lowered a piece at a time:
        // no copy of the header per request).
        let content_type = shape.content_type.trim_ascii();
        sha.update((content_type.len() as u64).to_be_bytes());
        for piece in content_type.chunks(64) {
            let mut lower = [0u8; 64];
            let lower = &mut lower[..piece.len()];
            lower.copy_from_slice(piece);
            lower.make_ascii_lowercase();
            sha.update(&*lower);
        }
        Self {
            sha,
            complete: false,
        }
    }

    /// The next piece of body.
    pub fn update(&mut self, chunk: &[u8]) {
        self.sha.update(chunk);
    }

    /// The body has ended: every byte went in.
    pub fn body_complete(&mut self) {
        self.complete = true;
    }

    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The fingerprint of what went in, for a body its reader saw end (records were decoded
    /// from it). Were it cut short, the hash of the part matches no retry of the request: a
    /// retry is then refused 422, never processed a second time.
    pub fn seal(&self) -> Fingerprint {
        Fingerprint(self.sha.clone().finalize().into())
    }

    /// The fingerprint, when the whole body went in.
    pub fn finish(&self) -> Option<Fingerprint> {
        self.complete
            .then(|| Fingerprint(self.sha.clone().finalize().into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape<'a>(path: &'a str, ack: &'a str, ct: &'a str) -> RequestShape<'a> {
        RequestShape {
            tenant: "acme",
            method: "POST",
            path,
            ack,
            content_type: ct.as_bytes(),
        }
    }

    fn print(s: RequestShape<'_>, chunks: &[&[u8]]) -> Fingerprint {
        let mut f = Fingerprinter::new(s);
        for c in chunks {
            f.update(c);
        }
        assert!(f.finish().is_none(), "not before the body's end");
        f.body_complete();
        let print = f.finish().expect("complete");
        assert_eq!(f.seal(), print, "sealed from the same bytes");
        print
    }

    #[test]
    fn the_same_request_in_other_chunks_has_the_same_fingerprint() {
        let s = shape("/v1/topics/t/records", "kafka", "application/json");
        assert_eq!(print(s, &[b"abc", b"def"]), print(s, &[b"abcdef"]));
    }

    #[test]
    fn what_changes_meaning_changes_the_fingerprint() {
        let base = print(
            shape("/v1/topics/t/records", "kafka", "application/json"),
            &[b"x"],
        );
        for other in [
            print(
                shape("/v1/topics/u/records", "kafka", "application/json"),
                &[b"x"],
            ),
            print(
                shape("/v1/topics/t/records", "enqueued", "application/json"),
                &[b"x"],
            ),
            print(
                shape("/v1/topics/t/records", "kafka", "application/x-ndjson"),
                &[b"x"],
            ),
            print(
                shape("/v1/topics/t/records", "kafka", "application/json"),
                &[b"y"],
            ),
        ] {
            assert_ne!(base, other);
        }
        assert_eq!(
            base,
            print(
                shape("/v1/topics/t/records", "kafka", " Application/JSON"),
                &[b"x"]
            )
        );
    }
}
