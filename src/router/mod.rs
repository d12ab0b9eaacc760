//! See lib.rs.

pub mod hash;
