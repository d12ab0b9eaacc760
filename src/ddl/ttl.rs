//! Oracle NoSQL time to live on PostgreSQL shards. A NoSQL table's rows live in a data table of
//! the same name in the schema `<schema>$rows`, with one more column, `$expires` (NULL: the row
//! never expires). The table's own name on each shard is a view of every other column of the
//! rows that have not expired, so no reader, through the proxy or on a shard, sees an expired
//! row; PostgreSQL writes through such a view as through the table (INSERT, UPDATE, DELETE,
//! ON CONFLICT). Statements that set a row's TTL are rewritten by the proxy to write the data
//! table (`crate::sql::ttl`); a background task purges expired rows in batches.
//!
//! Oracle's rules carried over: a table's TTL is the default of `$expires`, so it applies to rows
//! written after it is set and never changes a row's own; an expiry is rounded up to the next
//! hour or day boundary in UTC; a TTL of 0 means no expiry.

use super::model::QualifiedName;
use crate::model::{Ttl, TtlUnit, ROWS_SCHEMA_SUFFIX};
use crate::sql::quote::{quote_ident, quote_literal};

/// The expiry column of a NoSQL data table. Oracle NoSQL names cannot hold `$`, so no column of
/// the table can clash with it.
pub const EXPIRES: &str = "$expires";

/// Where the row functions live.
pub const FUNCTION_SCHEMA: &str = "public";

/// Where the rows of the NoSQL table shown as `view` live.
pub fn data_table(view: &QualifiedName) -> QualifiedName {
    QualifiedName::new(format!("{}{ROWS_SCHEMA_SUFFIX}", view.schema), &view.name)
}

/// The hours of a TTL.
fn hours(unit: TtlUnit) -> u32 {
    match unit {
        TtlUnit::Hours => 1,
        TtlUnit::Days => 24,
    }
}

/// The expiry of a row written now with a TTL of `amount` (an SQL integer expression: a literal
/// or a parameter) in `unit`: now plus the TTL, rounded up to the unit's boundary in UTC, or
/// NULL for 0. Days are 24 hours, as Oracle counts them, whatever the session's time zone.
pub fn expiry_sql(amount: &str, unit: TtlUnit) -> String {
    let field = match unit {
        TtlUnit::Hours => "hour",
        TtlUnit::Days => "day",
    };
    let step = hours(unit);
    format!(
        "CASE WHEN ({amount})::integer = 0 THEN NULL::timestamptz ELSE \
         date_trunc('{field}', now() + make_interval(hours => ({amount})::integer * {step}) \
         - interval '1 microsecond', 'UTC') + interval '{step} hours' END"
    )
}

/// The default of `$expires` for a table TTL: the expiry of a row written without one.
pub fn default_sql(ttl: Option<Ttl>) -> Option<String> {
    ttl.filter(|t| t.amount > 0)
        .map(|t| expiry_sql(&t.amount.to_string(), t.unit))
}

/// `ALTER TABLE … USING TTL`: rows written from now on inherit `ttl`; rows already written keep
/// the expiry they have.
pub fn set_default_statement(view: &QualifiedName, ttl: Option<Ttl>) -> String {
    let column = quote_ident(EXPIRES);
    match default_sql(ttl) {
        Some(default) => format!(
            "ALTER TABLE {} ALTER COLUMN {column} SET DEFAULT {default}",
            data_table(view)
        ),
        None => format!(
            "ALTER TABLE {} ALTER COLUMN {column} DROP DEFAULT",
            data_table(view)
        ),
    }
}

/// The condition under which a data-table row is visible, for the relation named `alias`.
pub fn unexpired_sql(alias: &str) -> String {
    let column = format!("{}.{}", quote_ident(alias), quote_ident(EXPIRES));
    format!("({column} IS NULL OR {column} > now())")
}

/// `d.k1 = <row>.k1 AND …` over the primary key.
fn key_match(primary_key: &[&str], row: &str) -> String {
    primary_key
        .iter()
        .map(|k| format!("d.{0} = {row}.{0}", quote_ident(k)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The view each shard shows under the table's name: the data table's columns in their order,
/// but `$expires`. Built on the shard from its catalog, so it also serves after an ALTER TABLE
/// changed the columns.
fn create_view_statement(view: &QualifiedName) -> String {
    let data = data_table(view);
    let body = format!(
        "DECLARE columns text; BEGIN \
         SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO columns \
         FROM pg_catalog.pg_attribute \
         WHERE attrelid = {data_lit}::regclass AND attnum > 0 AND NOT attisdropped \
         AND attname <> {expires_lit}; \
         EXECUTE format('CREATE VIEW %s AS SELECT %s FROM %s AS d WHERE %s', {view_lit}, \
         columns, {data_lit}, {filter_lit}); END",
        data_lit = quote_literal(&data.to_string()),
        expires_lit = quote_literal(EXPIRES),
        view_lit = quote_literal(&view.to_string()),
        filter_lit = quote_literal(&unexpired_sql("d")),
    );
    format!("DO {}", quote_literal(&body))
}

/// The row functions of Oracle NoSQL, one of each per table (PostgreSQL picks by the row's
/// type): `remaining_hours(t)` and `remaining_days(t)` count whole hours and days left (-1 for a
/// row that never expires), `expiration_time(t)` is the expiry in UTC (1970-01-01 for none).
/// They live in [`FUNCTION_SCHEMA`], which is on the usual search path, whatever the table's.
fn row_functions(view: &QualifiedName, primary_key: &[&str]) -> Vec<String> {
    let data = data_table(view);
    let lookup = |select: &str| {
        format!(
            "SELECT {select} FROM {data} AS d WHERE {}",
            key_match(primary_key, "($1)")
        )
    };
    let expires = format!("d.{}", quote_ident(EXPIRES));
    let remaining = |seconds: u32| {
        lookup(&format!(
            "coalesce(floor(extract(epoch FROM {expires} - now()) / {seconds})::integer, -1)"
        ))
    };
    let functions = [
        ("remaining_hours", "integer", remaining(3600)),
        ("remaining_days", "integer", remaining(86400)),
        (
            "expiration_time",
            "timestamp",
            lookup(&format!(
                "coalesce({expires} AT TIME ZONE 'UTC', timestamp '1970-01-01 00:00:00')"
            )),
        ),
    ];
    functions
        .into_iter()
        .map(|(name, returns, body)| {
            format!(
                "CREATE FUNCTION {}.{}(r {view}) RETURNS {returns} LANGUAGE sql STABLE AS {}",
                quote_ident(FUNCTION_SCHEMA),
                quote_ident(name),
                quote_literal(&body)
            )
        })
        .collect()
}

fn drop_row_functions(view: &QualifiedName) -> Vec<String> {
    ["remaining_hours", "remaining_days", "expiration_time"]
        .iter()
        .map(|name| {
            format!(
                "DROP FUNCTION IF EXISTS {}.{}({view})",
                quote_ident(FUNCTION_SCHEMA),
                quote_ident(name)
            )
        })
        .collect()
}

/// What shows a data table's rows under the table's name: the view and its row functions.
pub fn show_statements(view: &QualifiedName, primary_key: &[&str]) -> Vec<String> {
    let mut out = vec![create_view_statement(view)];
    out.extend(row_functions(view, primary_key));
    out
}

/// Undoes [`show_statements`], before a change to the data table's columns or its drop. A view
/// of the user's own over the table stops it, as it would stop the change on a plain table.
pub fn hide_statements(view: &QualifiedName) -> Vec<String> {
    let mut out = drop_row_functions(view);
    out.push(format!("DROP VIEW {view}"));
    out
}

/// Hides the view, runs `statement` on the data table, and shows the view again with the
/// columns the data table has then.
pub fn altered_statements(
    view: &QualifiedName,
    primary_key: &[&str],
    statement: String,
) -> Vec<String> {
    let mut out = hide_statements(view);
    out.push(statement);
    out.extend(show_statements(view, primary_key));
    out
}

/// What a new NoSQL table needs besides its data table and chunks: an index that lets the purge
/// find expired rows, and a trigger that lets an INSERT reuse the key of an expired row not yet
/// purged (it is gone for every reader, so its key is free).
pub fn support_statements(view: &QualifiedName, primary_key: &[&str]) -> Vec<String> {
    let data = data_table(view);
    let expires = quote_ident(EXPIRES);
    let function = QualifiedName::new(&data.schema, format!("{}$revive", data.name));
    let body = format!(
        "BEGIN DELETE FROM {data} AS d WHERE {} AND d.{expires} <= now(); RETURN NEW; END",
        key_match(primary_key, "NEW")
    );
    vec![
        format!("CREATE INDEX ON {data} ({expires}) WHERE {expires} IS NOT NULL"),
        format!(
            "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS {}",
            quote_literal(&body)
        ),
        format!(
            "CREATE TRIGGER {} BEFORE INSERT ON {data} FOR EACH ROW EXECUTE FUNCTION {function}()",
            quote_ident("$revive")
        ),
    ]
}

/// Drops a NoSQL table on a shard: its view and functions, then its rows. `if_exists` for a
/// table whose CREATE or DROP did not finish, which may have left any part of it.
pub fn drop_statements(view: &QualifiedName, if_exists: bool) -> Vec<String> {
    let data = data_table(view);
    let function = QualifiedName::new(&data.schema, format!("{}$revive", data.name));
    let mut out = drop_row_functions(view);
    let if_exists = if if_exists { "IF EXISTS " } else { "" };
    out.push(format!("DROP VIEW {if_exists}{view}"));
    out.push(format!("DROP TABLE {if_exists}{data}"));
    out.push(format!("DROP FUNCTION {if_exists}{function}()"));
    out
}

/// One batch of the background purge on one shard: at most `limit` expired rows, by key.
pub fn purge_statement(view: &QualifiedName, primary_key: &[&str], limit: u32) -> String {
    let data = data_table(view);
    let keys = primary_key
        .iter()
        .map(|k| quote_ident(k))
        .collect::<Vec<_>>()
        .join(", ");
    let expires = quote_ident(EXPIRES);
    format!(
        "DELETE FROM {data} WHERE ({keys}) IN (SELECT {keys} FROM {data} \
         WHERE {expires} <= now() LIMIT {limit})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::nosql_view_schema;

    #[test]
    fn rows_live_in_a_schema_of_their_own() {
        let view = QualifiedName::new("myproducts", "reviews");
        let data = data_table(&view);
        assert_eq!(data.to_string(), r#""myproducts$rows"."reviews""#);
        assert_eq!(nosql_view_schema(&data.schema), Some("myproducts"));
        assert_eq!(nosql_view_schema("public"), None);
        assert_eq!(nosql_view_schema("$rows"), None);
    }

    #[test]
    fn a_zero_ttl_never_expires() {
        assert_eq!(
            default_sql(Some(Ttl {
                amount: 0,
                unit: TtlUnit::Days
            })),
            None
        );
        let five_days = default_sql(Some(Ttl {
            amount: 5,
            unit: TtlUnit::Days,
        }))
        .unwrap();
        assert!(five_days.contains("(5)::integer * 24"), "{five_days}");
        assert!(five_days.contains("date_trunc('day'"), "{five_days}");
    }
}
