//! SQL text as the router sees it. For now only the lexical classifier; parsing with pg_query
//! and key extraction arrive with sharding.

pub mod classify;
