//! A family's tables on a shard that holds none of its chunks yet, and their removal from a shard
//! that gives its last chunk away. A chunk can only be attached where the family's partitioned
//! tables exist, and DDL reaches only the shards that hold chunks of a family (the catalog's
//! owners): so a move to a shard new to the family first makes the family's tables there, read
//! from the source as they are now (not replayed from history), and a shard left with no
//! chunk loses them, rather than keep copies that later DDL would no longer reach.
//!
//! What is carried over, per table: columns (types, collations, defaults, generated and identity
//! columns, NOT NULL), the partition key, constraints, indexes, triggers and whether each is
//! enabled, row-level security and its policies, comments on the table and its columns,
//! replica identity FULL or NOTHING, the owner and table privileges, and the sequences that
//! serial columns own. Not carried over: column privileges, extended statistics, per-column
//! statistics targets and storage settings (docs/behaviour.md).

use tokio_postgres::Client;

use super::plan::Plan;
use crate::sql::quote::{quote_ident, quote_literal};

/// Makes the family's tables on `target` as they are on `source`, in one transaction, unless the
/// root is there already (a move that made them and stopped, or another move of the family).
pub(super) async fn make_family(
    source: &Client,
    target: &Client,
    plan: &Plan,
) -> Result<(), tokio_postgres::Error> {
    let root = &plan.levels[0].parent;
    if exists(target, root).await? {
        return Ok(());
    }
    let ddl = definition(source, plan).await?;
    let made = target
        .batch_execute(&format!("BEGIN;\n{ddl}\nCOMMIT"))
        .await;
    if made.is_err() {
        // Back to its pool outside the failed transaction.
        let _ = target.batch_execute("ROLLBACK").await;
    }
    made
}

/// Drops the family's tables where none of them has a partition left (the shard gave its last
/// chunk away, or a move that made them was undone), children first, in the caller's
/// transaction. Nothing where a partition remains.
pub(super) async fn drop_family_if_empty(
    client: &Client,
    plan: &Plan,
) -> Result<(), tokio_postgres::Error> {
    let parents: Vec<String> = plan.levels.iter().map(|l| l.parent.clone()).collect();
    let partitions: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_inherits
              WHERE inhparent = ANY (SELECT pg_catalog.to_regclass(p)::oid
                                       FROM unnest($1::text[]) p)",
            &[&parents],
        )
        .await?
        .get(0);
    if partitions > 0 {
        return Ok(());
    }
    for level in plan.levels.iter().rev() {
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS {}", level.parent))
            .await?;
    }
    Ok(())
}

async fn exists(client: &Client, relation: &str) -> Result<bool, tokio_postgres::Error> {
    Ok(client
        .query_one(
            "SELECT pg_catalog.to_regclass($1) IS NOT NULL",
            &[&relation],
        )
        .await?
        .get(0))
}

/// The DDL that makes the family's tables as `client`'s shard has them: every table, then the
/// foreign keys (a child's refers to its parent, made before it).
pub(super) async fn definition(
    client: &Client,
    plan: &Plan,
) -> Result<String, tokio_postgres::Error> {
    client.batch_execute("BEGIN READ ONLY").await?;
    let read = definition_in(client, plan).await;
    let _ = client.batch_execute("COMMIT").await;
    read
}

/// The family's DDL, read in the caller's transaction with an empty search_path, so every name
/// PostgreSQL prints is qualified.
pub(super) async fn definition_in(
    client: &Client,
    plan: &Plan,
) -> Result<String, tokio_postgres::Error> {
    client.batch_execute("SET LOCAL search_path = ''").await?;
    let mut tables = String::new();
    let mut foreign_keys = String::new();
    for level in &plan.levels {
        let table = Table::read(client, &level.parent).await?;
        table.render(&mut tables, &mut foreign_keys);
    }
    client
        .batch_execute("SET LOCAL search_path TO DEFAULT")
        .await?;
    Ok(tables + &foreign_keys)
}

/// One partitioned table as `pg_catalog` describes it.
struct Table {
    name: String,
    columns: Vec<String>,
    partition_key: String,
    /// Statements after the CREATE TABLE; foreign keys apart.
    after: Vec<String>,
    foreign_keys: Vec<String>,
    /// Sequences owned by serial columns: made before the table, owned after.
    sequences: Vec<(String, String)>,
}

impl Table {
    async fn read(c: &Client, name: &str) -> Result<Table, tokio_postgres::Error> {
        let mut table = Table {
            name: name.to_string(),
            columns: Vec::new(),
            partition_key: c
                .query_one(
                    "SELECT pg_catalog.pg_get_partkeydef($1::text::regclass)",
                    &[&name],
                )
                .await?
                .get(0),
            after: Vec::new(),
            foreign_keys: Vec::new(),
            sequences: Vec::new(),
        };
        table.read_columns(c).await?;
        table.read_constraints(c).await?;
        table.read_indexes_and_triggers(c).await?;
        table.read_security(c).await?;
        table.read_comments_and_owner(c).await?;
        Ok(table)
    }

    async fn read_columns(&mut self, c: &Client) -> Result<(), tokio_postgres::Error> {
        let rows = c
            .query(
                "SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod),
                        a.attnotnull, a.attidentity::text, a.attgenerated::text,
                        pg_catalog.pg_get_expr(d.adbin, d.adrelid),
                        (SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(l.collname)
                           FROM pg_catalog.pg_collation l
                           JOIN pg_catalog.pg_namespace n ON n.oid = l.collnamespace
                          WHERE l.oid = a.attcollation AND a.attcollation <> t.typcollation),
                        CASE WHEN a.attidentity = '' THEN
                             pg_catalog.pg_get_serial_sequence($1, a.attname) END
                   FROM pg_catalog.pg_attribute a
                   JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                   LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                  WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped
                  ORDER BY a.attnum",
                &[&self.name],
            )
            .await?;
        for row in rows {
            let name: String = row.get(0);
            let mut column = format!("{} {}", quote_ident(&name), row.get::<_, String>(1));
            if let Some(collation) = row.get::<_, Option<String>>(6) {
                column += &format!(" COLLATE {collation}");
            }
            let default: Option<String> = row.get(5);
            match (
                row.get::<_, String>(3).as_str(),
                row.get::<_, String>(4).as_str(),
            ) {
                ("a", _) => column += " GENERATED ALWAYS AS IDENTITY",
                ("d", _) => column += " GENERATED BY DEFAULT AS IDENTITY",
                (_, "s") => {
                    column += &format!(
                        " GENERATED ALWAYS AS ({}) STORED",
                        default.unwrap_or_default()
                    )
                }
                _ => {
                    if let Some(default) = default {
                        column += &format!(" DEFAULT {default}");
                    }
                }
            }
            if row.get::<_, bool>(2) {
                column += " NOT NULL";
            }
            if let Some(sequence) = row.get::<_, Option<String>>(7) {
                self.sequences.push((sequence, name));
            }
            self.columns.push(column);
        }
        Ok(())
    }

    async fn read_constraints(&mut self, c: &Client) -> Result<(), tokio_postgres::Error> {
        let rows = c
            .query(
                "SELECT conname::text, pg_catalog.pg_get_constraintdef(oid), contype = 'f'
                   FROM pg_catalog.pg_constraint
                  WHERE conrelid = $1::text::regclass AND conparentid = 0
                    AND contype IN ('p', 'u', 'c', 'x', 'f')
                  ORDER BY contype = 'f', conname",
                &[&self.name],
            )
            .await?;
        for row in rows {
            let statement = format!(
                "ALTER TABLE {} ADD CONSTRAINT {} {};",
                self.name,
                quote_ident(row.get(0)),
                row.get::<_, String>(1)
            );
            match row.get::<_, bool>(2) {
                true => self.foreign_keys.push(statement),
                false => self.after.push(statement),
            }
        }
        Ok(())
    }

    async fn read_indexes_and_triggers(&mut self, c: &Client) -> Result<(), tokio_postgres::Error> {
        // Indexes of constraints come with them.
        let indexes = c
            .query(
                "SELECT pg_catalog.pg_get_indexdef(i.indexrelid)
                   FROM pg_catalog.pg_index i
                  WHERE i.indrelid = $1::text::regclass
                    AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                                     WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid)",
                &[&self.name],
            )
            .await?;
        for row in indexes {
            // The table has no partitions yet: an index made on it alone is valid at once.
            let def = row.get::<_, String>(0).replacen(" ON ONLY ", " ON ", 1);
            self.after.push(format!("{def};"));
        }
        let triggers = c
            .query(
                "SELECT pg_catalog.pg_get_triggerdef(oid), tgname::text, tgenabled::text
                   FROM pg_catalog.pg_trigger
                  WHERE tgrelid = $1::text::regclass AND NOT tgisinternal AND tgparentid = 0",
                &[&self.name],
            )
            .await?;
        for row in triggers {
            self.after.push(format!("{};", row.get::<_, String>(0)));
            let state = match row.get::<_, String>(2).as_str() {
                "D" => "DISABLE TRIGGER",
                "R" => "ENABLE REPLICA TRIGGER",
                "A" => "ENABLE ALWAYS TRIGGER",
                _ => continue,
            };
            let trigger = quote_ident(row.get(1));
            self.after
                .push(format!("ALTER TABLE {} {state} {trigger};", self.name));
        }
        Ok(())
    }

    async fn read_security(&mut self, c: &Client) -> Result<(), tokio_postgres::Error> {
        let row = c
            .query_one(
                "SELECT relrowsecurity, relforcerowsecurity, relreplident::text
                   FROM pg_catalog.pg_class WHERE oid = $1::text::regclass",
                &[&self.name],
            )
            .await?;
        let name = &self.name;
        if row.get::<_, bool>(0) {
            self.after
                .push(format!("ALTER TABLE {name} ENABLE ROW LEVEL SECURITY;"));
        }
        if row.get::<_, bool>(1) {
            self.after
                .push(format!("ALTER TABLE {name} FORCE ROW LEVEL SECURITY;"));
        }
        match row.get::<_, String>(2).as_str() {
            "f" => self
                .after
                .push(format!("ALTER TABLE {name} REPLICA IDENTITY FULL;")),
            "n" => self
                .after
                .push(format!("ALTER TABLE {name} REPLICA IDENTITY NOTHING;")),
            _ => {}
        }
        let policies = c
            .query(
                "SELECT p.polname::text, p.polpermissive,
                        CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT'
                                      WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
                        ARRAY(SELECT CASE WHEN r = 0 THEN 'PUBLIC'
                                          ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(r)) END
                                FROM unnest(p.polroles) r),
                        pg_catalog.pg_get_expr(p.polqual, p.polrelid),
                        pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid)
                   FROM pg_catalog.pg_policy p WHERE p.polrelid = $1::text::regclass",
                &[&self.name],
            )
            .await?;
        for row in policies {
            let mut policy = format!(
                "CREATE POLICY {} ON {name} AS {} FOR {} TO {}",
                quote_ident(row.get(0)),
                if row.get(1) {
                    "PERMISSIVE"
                } else {
                    "RESTRICTIVE"
                },
                row.get::<_, &str>(2),
                row.get::<_, Vec<String>>(3).join(", "),
            );
            if let Some(using) = row.get::<_, Option<String>>(4) {
                policy += &format!(" USING ({using})");
            }
            if let Some(check) = row.get::<_, Option<String>>(5) {
                policy += &format!(" WITH CHECK ({check})");
            }
            self.after.push(policy + ";");
        }
        Ok(())
    }

    async fn read_comments_and_owner(&mut self, c: &Client) -> Result<(), tokio_postgres::Error> {
        let name = &self.name;
        let comments = c
            .query(
                "SELECT NULL::text, pg_catalog.obj_description($1::text::regclass, 'pg_class')
                 UNION ALL
                 SELECT attname::text, pg_catalog.col_description(attrelid, attnum)
                   FROM pg_catalog.pg_attribute
                  WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped",
                &[&name],
            )
            .await?;
        for row in comments {
            let Some(text) = row.get::<_, Option<String>>(1) else {
                continue;
            };
            let on = match row.get::<_, Option<String>>(0) {
                None => format!("TABLE {name}"),
                Some(column) => format!("COLUMN {name}.{}", quote_ident(&column)),
            };
            self.after
                .push(format!("COMMENT ON {on} IS {};", quote_literal(&text)));
        }
        let owner: String = c
            .query_one(
                "SELECT pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(relowner))
                   FROM pg_catalog.pg_class WHERE oid = $1::text::regclass",
                &[&name],
            )
            .await?
            .get(0);
        self.after
            .push(format!("ALTER TABLE {name} OWNER TO {owner};"));
        let grants = c
            .query(
                "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                             ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
                        a.privilege_type, a.is_grantable
                   FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
                  WHERE c.oid = $1::text::regclass AND a.grantee <> c.relowner",
                &[&name],
            )
            .await?;
        for row in grants {
            let option = if row.get(2) { " WITH GRANT OPTION" } else { "" };
            self.after.push(format!(
                "GRANT {} ON {name} TO {}{option};",
                row.get::<_, &str>(1),
                row.get::<_, &str>(0)
            ));
        }
        Ok(())
    }

    fn render(&self, tables: &mut String, foreign_keys: &mut String) {
        for (sequence, _) in &self.sequences {
            tables.push_str(&format!("CREATE SEQUENCE IF NOT EXISTS {sequence};\n"));
        }
        tables.push_str(&format!(
            "CREATE TABLE {} (\n    {}\n) PARTITION BY {};\n",
            self.name,
            self.columns.join(",\n    "),
            self.partition_key
        ));
        for (sequence, column) in &self.sequences {
            tables.push_str(&format!(
                "ALTER SEQUENCE {sequence} OWNED BY {}.{};\n",
                self.name,
                quote_ident(column)
            ));
        }
        for statement in &self.after {
            tables.push_str(statement);
            tables.push('\n');
        }
        for statement in &self.foreign_keys {
            foreign_keys.push_str(statement);
            foreign_keys.push('\n');
        }
    }
}
