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

/// The name PostgreSQL gives a foreign key declared without one on `table`'s `columns`:
/// `<table>_<columns joined by _>_fkey` (ChooseForeignKeyConstraintNameAddition, then
/// makeObjectName), the longer of the two parts shortened a byte at a time until the whole fits
/// in 63 bytes. `label` is `fkey`, or `fkey1`, `fkey2`, … when an earlier name took it.
pub fn foreign_key_name(table: &str, columns: &[&str], label: &str) -> String {
    // The columns' part stops growing once it reaches NAMEDATALEN bytes.
    let mut addition = String::new();
    for column in columns {
        if !addition.is_empty() {
            addition.push('_');
        }
        addition.push_str(truncate(column, MAX_IDENTIFIER_BYTES));
        if addition.len() > MAX_IDENTIFIER_BYTES {
            break;
        }
    }
    // Two underscores and the label.
    let available = MAX_IDENTIFIER_BYTES - label.len() - 2;
    let (mut table_bytes, mut addition_bytes) = (table.len(), addition.len());
    while table_bytes + addition_bytes > available {
        if table_bytes > addition_bytes {
            table_bytes -= 1;
        } else {
            addition_bytes -= 1;
        }
    }
    format!(
        "{}_{}_{label}",
        truncate(table, table_bytes),
        truncate(&addition, addition_bytes)
    )
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

#[cfg(test)]
mod tests {
    use super::foreign_key_name;

    /// The names PostgreSQL 15 gave these foreign keys.
    #[test]
    fn foreign_key_names_are_postgresqls() {
        let a60 = "a".repeat(60);
        let b60 = "b".repeat(60);
        assert_eq!(foreign_key_name("q", &["x"], "fkey"), "q_x_fkey");
        assert_eq!(foreign_key_name("q", &["x"], "fkey1"), "q_x_fkey1");
        assert_eq!(foreign_key_name("q", &["x", "y"], "fkey"), "q_x_y_fkey");
        assert_eq!(
            foreign_key_name(&a60, &["c"], "fkey"),
            format!("{}_c_fkey", "a".repeat(56))
        );
        assert_eq!(
            foreign_key_name(&a60, &[&b60], "fkey"),
            format!("{}_{}_fkey", "a".repeat(29), "b".repeat(28))
        );
        let e31 = "é".repeat(31);
        assert_eq!(
            foreign_key_name(&e31, &[&e31], "fkey"),
            format!("{}_{}_fkey", "é".repeat(14), "é".repeat(14))
        );
    }
}
