//! SQL text as the proxy sees it: the lexical classifier (what pins a session, what the proxy
//! answers itself) and quoting for the SQL the proxy builds. Parsing for routing is in `router`.

pub mod admin;
pub mod classify;
pub mod cursor;
pub mod deparse;
pub mod func;
pub mod nested_names;
pub mod params;
pub mod prepare;
pub mod quote;
pub mod reset;
pub mod script;
pub mod search_path;
pub mod signal;
