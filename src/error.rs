//! The proxy's error type and its one mapping to SQLSTATE and client-safe text.
