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
    object_name(table, &name_addition(columns), label)
}

/// The columns' part of a generated name: joined by `_`, and no longer growing once it reaches
/// NAMEDATALEN bytes (ChooseForeignKeyConstraintNameAddition, ChooseIndexNameAddition).
pub fn name_addition(columns: &[&str]) -> String {
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
    addition
}

/// `<name>_<addition>_<label>` as PostgreSQL's makeObjectName builds it: the longer of the two
/// parts is shortened a byte at a time until the whole fits in 63 bytes.
pub fn object_name(name: &str, addition: &str, label: &str) -> String {
    // Two underscores and the label.
    let available = MAX_IDENTIFIER_BYTES - label.len() - 2;
    let (mut name_bytes, mut addition_bytes) = (name.len(), addition.len());
    while name_bytes + addition_bytes > available {
        if name_bytes > addition_bytes {
            name_bytes -= 1;
        } else {
            addition_bytes -= 1;
        }
    }
    format!(
        "{}_{}_{label}",
        truncate(name, name_bytes),
        truncate(addition, addition_bytes)
    )
}

/// The names an index's columns contribute to its generated name, as PostgreSQL's
/// ChooseIndexColumnNames makes them: a name met before gets `1`, `2`, … appended (the name
/// shortened so that it stays under 64 bytes).
pub fn index_column_names(names: &[&str]) -> Vec<String> {
    let mut chosen: Vec<String> = Vec::new();
    for name in names {
        let mut candidate = (*name).to_owned();
        let mut n = 0;
        while chosen.contains(&candidate) {
            n += 1;
            let digits = n.to_string();
            let base = truncate(name, MAX_IDENTIFIER_BYTES - digits.len());
            candidate = format!("{base}{digits}");
        }
        chosen.push(candidate);
    }
    chosen
}

/// The label of the `pass`-th name tried (ChooseRelationName): `idx`, `idx1`, `idx2`, ….
pub fn numbered_label(label: &str, pass: u32) -> String {
    match pass {
        0 => label.to_owned(),
        n => format!("{label}{n}"),
    }
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
    use super::{foreign_key_name, index_column_names, name_addition, object_name};

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

    /// The names PostgreSQL 15 gave `CREATE INDEX ON t (…)`: `t_id_id1_idx` for `(id, id)`,
    /// `t_lower_w_id_idx` for `(lower(v), w) INCLUDE (id)`.
    #[test]
    fn index_names_are_postgresqls() {
        let columns = index_column_names(&["id", "id", "id"]);
        assert_eq!(columns, ["id", "id1", "id2"]);
        let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
        assert_eq!(
            object_name("t", &name_addition(&refs), "idx"),
            "t_id_id1_id2_idx"
        );
        assert_eq!(
            object_name("t", &name_addition(&["lower", "w", "id"]), "idx"),
            "t_lower_w_id_idx"
        );
        let long = "c".repeat(63);
        assert_eq!(
            index_column_names(&[&long, &long])[1],
            format!("{}1", "c".repeat(62))
        );
    }
}
