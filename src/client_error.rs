//! How an error reaches a client: every layer's error type says its own SQLSTATE and a message
//! that says what to change, through [`ClientError`]. This module imports only the protocol
//! (a leaf), so any layer can implement it without reaching up; each implementation is one exhaustive
//! match in the layer that owns the error, so a new variant cannot reach a client without a
//! deliberate code.

use crate::protocol::{self, Severity};
use bytes::{Bytes, BytesMut};
use tokio_postgres::error::SqlState;

/// An error as a client sees it.
pub trait ClientError {
    fn sqlstate(&self) -> SqlState;
    /// Text safe to show a client: no passwords, no internal addresses beyond the shard's.
    fn client_message(&self) -> String;

    /// The ErrorResponse that tells a client of it.
    fn error_frame(&self) -> Bytes {
        let mut out = BytesMut::new();
        protocol::error_response(
            &mut out,
            Severity::Error,
            &self.sqlstate(),
            &self.client_message(),
        );
        out.freeze()
    }
}

/// An error with the errors that caused it, `outer: inner: …`. tokio-postgres's errors say
/// only their kind ("error performing TLS handshake") and keep the reason as their source.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}
