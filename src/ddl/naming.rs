//! The names of the relations shardwire creates on the shards: partitions and chunks are
//! `<table>_<suffix>`, kept within PostgreSQL's identifier limit; Oracle NoSQL children live in
//! a schema named after their root. The rewrite, the executor and the router derive them, so
//! they must agree.

use super::model::QualifiedName;

/// PostgreSQL's NAMEDATALEN - 1.
const MAX_IDENTIFIER_BYTES: usize = 63;

fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `<base>_<suffix>`, kept within PostgreSQL's 63 bytes: a long base is shortened and followed by
/// 8 hex digits of its hash so that different long bases stay different.
pub fn partition_relation(base: &str, suffix: &str) -> String {
    let full = format!("{base}_{suffix}");
    if full.len() <= MAX_IDENTIFIER_BYTES {
        return full;
    }
    let tag = format!("{:08x}", fnv1a(base));
    let room = MAX_IDENTIFIER_BYTES.saturating_sub(suffix.len() + tag.len() + 2);
    if room >= 8 {
        format!("{}_{tag}_{suffix}", truncate(base, room))
    } else {
        let tag = format!("{:08x}", fnv1a(&full));
        format!(
            "{}_{tag}",
            truncate(&full, MAX_IDENTIFIER_BYTES - tag.len() - 1)
        )
    }
}

pub fn chunk_suffix(k: u32) -> String {
    format!("c{k}")
}

/// Where an Oracle NoSQL child `root.child[.grandchild…]` lives, and its parent: the schema is
/// named after the root (a table of `default_schema`), so `root.child` means the same table on
/// a shard as through the proxy; a deeper level's relation name is the path below the root
/// joined by dots (`root."child.grandchild"`). `None` for a one-part name.
pub fn nosql_child(parts: &[&str], default_schema: &str) -> Option<(QualifiedName, QualifiedName)> {
    let (root, below) = parts.split_first()?;
    let (_, parent_below) = below.split_last()?;
    let parent = match parent_below {
        [] => QualifiedName::new(default_schema, *root),
        path => QualifiedName::new(*root, path.join(".")),
    };
    Some((parent, QualifiedName::new(*root, below.join("."))))
}
