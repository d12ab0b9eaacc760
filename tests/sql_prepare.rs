//! SQL-level PREPARE, EXECUTE and DEALLOCATE over sharded tables: each EXECUTE runs as the
//! statement with its arguments, routed by them (checked in the shards' statement logs), with
//! the answers one PostgreSQL gives (the same statements run on a plain copy of the rows, on
//! one PostgreSQL, prove each check).
mod common;
mod routing_common;

use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// The same statements through the proxy (table `name`) and on the reference copy
/// (`name_ref`, one PostgreSQL): the same rows and command tags.
async fn both(proxy: &Client, plain: &Client, name: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let through = simple_rows(proxy, &sql.replace("{t}", name)).await;
    let reference = simple_rows(plain, &sql.replace("{t}", &format!("{name}_ref"))).await;
    assert_eq!(through, reference, "{sql}");
    through
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_prepare_and_execute_route_like_their_statement() {
    let proxy = start();
    let c = proxy.connect().await;
    let plain = twin_tables(&c, "sp_t").await;
    log_all_statements().await;

    // Keyed: one shard runs it, with the argument in place.
    let prepare = "PREPARE by_id (int) AS SELECT id, v FROM {t} WHERE id = $1 /* {t}-keyed */";
    both(&c, &plain, "sp_t", prepare).await;
    let rows = both(&c, &plain, "sp_t", "EXECUTE by_id(7)").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        shards_that_ran("sp_t-keyed").len(),
        1,
        "routed by the argument"
    );
    // A text argument is coerced to the declared type, as EXECUTE does.
    let rows = both(&c, &plain, "sp_t", "EXECUTE by_id('12')").await;
    assert_eq!(rows[0][0].as_deref(), Some("12"));

    // Types left to PostgreSQL, several shards, ordered and aggregated.
    both(
        &c,
        &plain,
        "sp_t",
        "PREPARE per_group AS SELECT grp, count(*), sum(n) FROM {t} \
         WHERE id > $1 AND v IS DISTINCT FROM $2 GROUP BY grp ORDER BY grp",
    )
    .await;
    both(&c, &plain, "sp_t", "EXECUTE per_group(100, 'v010')").await;
    both(&c, &plain, "sp_t", "EXECUTE per_group(-1, NULL)").await;

    // Writes: placed by key, and several shards in one transaction.
    both(
        &c,
        &plain,
        "sp_t",
        "PREPARE put (int, int, text) AS INSERT INTO {t} (id, grp, v) VALUES ($1, $2, $3)",
    )
    .await;
    let inserted = c.simple_query("EXECUTE put(1001, 3, 'new')").await.unwrap();
    assert_eq!(tag(&inserted), 1, "INSERT 0 1");
    plain
        .simple_query("EXECUTE put(1001, 3, 'new')")
        .await
        .unwrap();
    let holding: Vec<i64> = counts_where("sp_t", "WHERE id = 1001").await;
    assert_eq!(holding.iter().sum::<i64>(), 1, "{holding:?}");
    let keyed = simple_rows(&c, "SELECT v FROM sp_t WHERE id = 1001").await;
    assert_eq!(
        keyed,
        [[Some("new".to_string())]],
        "on the shard its key hashes to"
    );
    both(
        &c,
        &plain,
        "sp_t",
        "PREPARE bump AS UPDATE {t} SET grp = grp + $1 WHERE id <= $2",
    )
    .await;
    for client in [&c, &plain] {
        client
            .batch_execute("BEGIN; EXECUTE bump(10, 40); COMMIT")
            .await
            .expect("EXECUTE in a block over several shards");
    }
    both(
        &c,
        &plain,
        "sp_t",
        "SELECT grp, count(*) FROM {t} GROUP BY grp ORDER BY grp",
    )
    .await;

    // PostgreSQL's errors, and the session stays usable.
    let errors = [
        ("EXECUTE nothing(1)", SqlState::INVALID_SQL_STATEMENT_NAME),
        ("PREPARE by_id AS SELECT 1", SqlState::DUPLICATE_PSTATEMENT),
        ("EXECUTE by_id(1, 2)", SqlState::SYNTAX_ERROR),
        ("EXECUTE by_id", SqlState::SYNTAX_ERROR),
        ("EXECUTE by_id('x')", SqlState::INVALID_TEXT_REPRESENTATION),
    ];
    for (sql, expected) in errors {
        for client in [&c, &plain] {
            let e = client.batch_execute(sql).await.expect_err(sql);
            assert_eq!(code(&e), expected, "{sql}: {e}");
        }
    }
    both(&c, &plain, "sp_t", "DEALLOCATE by_id").await;
    for client in [&c, &plain] {
        let e = client.batch_execute("EXECUTE by_id(7)").await.unwrap_err();
        assert_eq!(code(&e), SqlState::INVALID_SQL_STATEMENT_NAME, "{e}");
    }
    both(&c, &plain, "sp_t", "DEALLOCATE ALL").await;
    for client in [&c, &plain] {
        let e = client
            .batch_execute("EXECUTE put(1, 1, 'x')")
            .await
            .unwrap_err();
        assert_eq!(code(&e), SqlState::INVALID_SQL_STATEMENT_NAME, "{e}");
    }

    // Prepared and executed in one query string.
    let script = "PREPARE two AS SELECT count(*) FROM {t} WHERE grp = $1; EXECUTE two(2)";
    both(&c, &plain, "sp_t", script).await;

    // A name prepared in one session is not another's.
    let other = proxy.connect().await;
    let e = other.batch_execute("EXECUTE two(2)").await.unwrap_err();
    assert_eq!(code(&e), SqlState::INVALID_SQL_STATEMENT_NAME, "{e}");

    // DISCARD ALL forgets them, as PostgreSQL does.
    c.batch_execute("DISCARD ALL").await.unwrap();
    let e = c.batch_execute("EXECUTE two(2)").await.unwrap_err();
    assert_eq!(code(&e), SqlState::INVALID_SQL_STATEMENT_NAME, "{e}");

    c.batch_execute("DROP TABLE sp_t").await.unwrap();
    plain.batch_execute("DROP TABLE sp_t_ref").await.unwrap();
}
