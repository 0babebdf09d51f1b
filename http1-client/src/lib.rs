//! The workspace's HTTP/1.1 answer codec, shared by every hand-written client: the gateway's
//! upstream (`gateway/src/upstream`) and the load generator (`loadtest/src/http1.rs`). Both
//! write a prepared request and read the answer in place from their own buffer; what an answer's
//! head means (its status, the framing of its body, whether the connection may be kept) is
//! decided here, once, with property tests on arbitrary and mutated answers, and checked against
//! hyper by the gateway's differential test (`gateway/src/upstream/vs_hyper.rs`).
//!
//! Framing (RFC 9112): interim `1xx` answers are skipped (`101` is refused); the body is
//! delimited by `Transfer-Encoding` ending in `chunked`, else by the end of the connection when
//! there is a transfer coding, else by `Content-Length`, else by the end of the connection;
//! `HEAD`, `204` and `304` answers have none. A connection is kept when the answer says so
//! (HTTP/1.1 without `close`, HTTP/1.0 with `keep-alive`), did not carry both a length and a
//! coding, and (the reader's part) its body was delimited and read to the end with nothing after.
#![forbid(unsafe_code)]

mod head;

pub use head::{Framing, Head, MAX_HEAD_BYTES, content_length_value, parse_head};
