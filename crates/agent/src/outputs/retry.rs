//! One rule for every network output: what a refusal means for the data.
//!
//! An answer either says the data can never be taken as it is (the
//! request or document is malformed: sending it again gives the same
//! answer), or it says "not now": the server is down or overloaded, the
//! credentials expired, the user lacks a privilege, the path or index does
//! not exist yet, a write block is set. Everything of the second kind can
//! pass later, once someone fixes the server or its settings, so the data
//! is kept and retried with backoff while the output reports itself
//! failing; only the first kind is dropped, counted and reported.

/// What to do with data a server refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Keep it and send it again after a backoff.
    Retry,
    /// Drop it (counted): no retry can change the answer.
    Permanent,
}

/// The verdict on an HTTP status of a whole request or of one document
/// (an Elasticsearch bulk item, an OTLP/HTTP export). Only 400 is
/// permanent: the body itself is wrong (a mapping conflict, a malformed
/// export). Everything else — 401, 403, 404, 408, 413, 429, 5xx and
/// statuses no server should send — may pass later.
pub fn http_status(status: u16) -> Refusal {
    match status {
        400 => Refusal::Permanent,
        _ => Refusal::Retry,
    }
}

/// The verdict on a gRPC status of an OTLP/gRPC export: only
/// `INVALID_ARGUMENT` (the request is malformed) is permanent. The OTLP
/// specification also lets a client drop on `UNAUTHENTICATED`,
/// `PERMISSION_DENIED`, `UNIMPLEMENTED` and the rest, but those are a
/// wrong token or endpoint that an operator fixes: the data waits.
pub fn grpc_status(code: u32) -> Refusal {
    match code {
        INVALID_ARGUMENT => Refusal::Permanent,
        _ => Refusal::Retry,
    }
}

/// gRPC's `INVALID_ARGUMENT`.
const INVALID_ARGUMENT: u32 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_malformed_body_is_permanent() {
        assert_eq!(http_status(400), Refusal::Permanent);
        for s in [
            401, 403, 404, 405, 408, 413, 429, 500, 502, 503, 504, 0, 999,
        ] {
            assert_eq!(http_status(s), Refusal::Retry, "{s}");
        }
        assert_eq!(grpc_status(3), Refusal::Permanent, "INVALID_ARGUMENT");
        // UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED, UNKNOWN,
        // UNAVAILABLE, NOT_FOUND, INTERNAL, and codes not known yet.
        for c in [16, 7, 12, 2, 14, 5, 13, 99] {
            assert_eq!(grpc_status(c), Refusal::Retry, "{c}");
        }
    }
}
