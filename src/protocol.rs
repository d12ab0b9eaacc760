//! Frames of the PostgreSQL protocol (1-byte type, 4-byte length) and the few messages the proxy
//! composes itself.
