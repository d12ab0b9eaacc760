//! The Oracle NoSQL CREATE TABLE examples of seeds/000 and seeds/002 (the cloud service's
//! table design, in English and in Chinese), verbatim with their `//` and `/* */` comments and
//! the stray `"` they were copied with, through psql and the proxy; then where their rows land,
//! read on the shards themselves. Also: SHARD(...) co-location, the NoSQL types against
//! PostgreSQL, and bad NoSQL DDL refused with nothing left on any shard.

mod common;
mod sharding_common;

use common::{log_all_statements, shards, shards_that_ran, TestProxy};
use sharding_common::{catalog_tables, failed, hash_tree, rows, succeeded, tree};
use tokio_postgres::Client;

/// seeds/000 (and seeds/002, identical but for the trailing `;`).
const AUDIENCE_SCHEMALESS: &str = "// schema less, data is stored in a JSON field
CREATE TABLE audience_info (
       cookie_id LONG,
       audience_data JSON,
       PRIMARY KEY(cookie_id))";

const AUDIENCE_FIXED_000: &str = "// fixed schema, data is stored in typed fields.
CREATE TABLE audience_info(
       cookie_id LONG,
       ipaddr STRING,
       audience_segment RECORD(sports_lover TIMESTAMP(9),
                               book_reader TIMESTAMP(9)),
       PRIMARY KEY(cookie_id));";

const AUDIENCE_FIXED_002: &str = "// fixed schema, data is stored in typed fields.
CREATE TABLE audience_info(
       cookie_id LONG,
       ipaddr STRING,
       audience_segment RECORD(sports_lover TIMESTAMP(9),
                               book_reader TIMESTAMP(9)),
       PRIMARY KEY(cookie_id))";

const AUDIENCE_HYBRID_000: &str = "// mixed, data is stored in both typed and JSON fields.
CREATE TABLE audience_info (
       cookie_id LONG,
       ipaddr STRING,
       audience_segment JSON,
       PRIMARY KEY(cookie_id));";

const AUDIENCE_HYBRID_002: &str = "// mixed, data is stored in both typed and JSON fields.
CREATE TABLE audience_info (
       cookie_id LONG,
       ipaddr STRING,
       audience_segment JSON,
       PRIMARY KEY(cookie_id))";

/// seeds/000 ends it with `)";`, seeds/002 with `)"`: copied out of a Java string.
const MY_PRODUCTS_000: &str = "/* Create a new table called users. */
CREATE TABLE if not exists myProducts 
(
  productName STRING,
  productType STRING,
  productLine INTEGER,
  PRIMARY KEY (productName)
)\";";

const MY_PRODUCTS_002: &str = "/* Create a new table called users. */
CREATE TABLE if not exists myProducts
(
  productName STRING,
  productType STRING,
  productLine INTEGER,
  PRIMARY KEY (productName)
)\"";

/// Where the rows of the NoSQL table `table` (of schema public) live on a shard.
fn data_table(table: &str) -> String {
    format!("\"public$rows\".{table}")
}

fn proxy() -> TestProxy {
    TestProxy::start_with(|c| c.proxy.chunks_per_shard = 2)
}

struct Shards {
    s1: Client,
    s2: Client,
}

impl Shards {
    async fn connect() -> Shards {
        Shards {
            s1: shards().connect(0).await,
            s2: shards().connect(1).await,
        }
    }

    /// A NoSQL table's rows live in its data table, hash-partitioned; its name is a view.
    async fn assert_hash_sharded(&self, table: &str) {
        let data = data_table(table);
        assert_eq!(tree(&self.s1, &data).await, hash_tree(table, 4, &[0, 2]));
        assert_eq!(tree(&self.s2, &data).await, hash_tree(table, 4, &[1, 3]));
        for client in [&self.s1, &self.s2] {
            let kind: String = client
                .query_one(
                    "SELECT relkind::text FROM pg_class WHERE oid = $1::text::regclass",
                    &[&table],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(kind, "v", "{table} is a view on the shards");
        }
    }

    async fn assert_absent(&self, table: &str) {
        let data = data_table(table);
        for (name, client) in [("s1", &self.s1), ("s2", &self.s2)] {
            assert_eq!(tree(client, table).await, [], "{table} on {name}");
            assert_eq!(tree(client, &data).await, [], "{data} on {name}");
        }
        assert!(
            !catalog_tables(&self.s1)
                .await
                .contains(&format!("public.{table}")),
            "{table} left in the catalog"
        );
    }

    /// How many rows of `table` each shard holds, read on the shards.
    async fn counts(&self, table: &str) -> [i64; 2] {
        let sql = format!("SELECT count(*) FROM {table}");
        let mut out = [0; 2];
        for (i, client) in [&self.s1, &self.s2].into_iter().enumerate() {
            out[i] = client.query_one(&sql, &[]).await.unwrap().get(0);
        }
        out
    }
}

#[tokio::test]
async fn nosql_seed_tables_are_sharded_by_their_keys() {
    let proxy = proxy();
    let shards = Shards::connect().await;
    let client = proxy.connect().await;

    for sql in [
        AUDIENCE_SCHEMALESS,
        AUDIENCE_FIXED_000,
        AUDIENCE_FIXED_002,
        AUDIENCE_HYBRID_000,
        AUDIENCE_HYBRID_002,
    ] {
        let out = succeeded(proxy.psql(sql));
        assert!(out.contains("CREATE TABLE"), "{out}");
        shards.assert_hash_sharded("audience_info").await;
        let listed = rows(&client, "SHOW SHARDED TABLES").await;
        let entry = listed.iter().find(|r| r[0] == "audience_info").unwrap();
        assert_eq!(
            entry[..5],
            [
                "audience_info",
                "audience_info",
                "",
                "consistent_hash",
                "cookie_id"
            ]
        );
        // Rows inserted through the proxy land on their key's shard: PostgreSQL takes a row only
        // into the chunk its key hashes to, and each shard holds only its own chunks.
        let inserts: String = (1..=40)
            .map(|id| format!("INSERT INTO audience_info (cookie_id) VALUES ({id});\n"))
            .collect();
        let out = succeeded(proxy.psql(&inserts));
        assert_eq!(out.matches("INSERT 0 1").count(), 40, "{out}");
        let [on_s1, on_s2] = shards.counts("audience_info").await;
        assert_eq!(on_s1 + on_s2, 40);
        assert!(on_s1 > 0 && on_s2 > 0, "{on_s1} / {on_s2}");
        succeeded(proxy.psql("DROP TABLE audience_info;"));
        shards.assert_absent("audience_info").await;
    }

    // The typed record of the fixed-schema example holds only its fields, as timestamps' text.
    succeeded(proxy.psql(AUDIENCE_FIXED_000));
    succeeded(proxy.psql(
        "INSERT INTO audience_info VALUES (1, '10.0.0.1', \
         '{\"sports_lover\": \"2018-11-30\", \"book_reader\": \"2018-12-01\"}');",
    ));
    for wrong in [
        "{\"sports_lover\": 5}",
        "{\"cinema_goer\": \"2018-11-30\"}",
        "[\"2018-11-30\"]",
    ] {
        let stderr = failed(proxy.psql(&format!(
            "INSERT INTO audience_info VALUES (2, 'x', '{wrong}');"
        )));
        assert!(stderr.contains("check constraint"), "{wrong}: {stderr}");
    }
    succeeded(proxy.psql("DROP TABLE audience_info;"));

    for sql in [MY_PRODUCTS_000, MY_PRODUCTS_002] {
        let out = succeeded(proxy.psql(sql));
        assert!(out.contains("CREATE TABLE"), "{out}");
        shards.assert_hash_sharded("myproducts").await;
        // IF NOT EXISTS: the second run of the same text is a no-op.
        succeeded(proxy.psql(sql));
        succeeded(proxy.psql("DROP TABLE myproducts;"));
        shards.assert_absent("myproducts").await;
    }
}

#[tokio::test]
async fn shard_key_co_locates_rows_and_bad_nosql_ddl_leaves_nothing() {
    let proxy = proxy();
    let shards = Shards::connect().await;
    succeeded(proxy.psql(
        "CREATE TABLE coloc (productName STRING, productType STRING, productClass STRING,
             PRIMARY KEY (SHARD(productType, productName), productClass))",
    ));
    shards.assert_hash_sharded("coloc").await;
    let inserts: String = (0..10)
        .flat_map(|p| (0..5).map(move |c| (p, c)))
        .map(|(p, c)| format!("INSERT INTO coloc VALUES ('n{p}', 't{p}', 'c{c}');\n"))
        .collect();
    let out = succeeded(proxy.psql(&inserts));
    assert_eq!(out.matches("INSERT 0 1").count(), 50, "{out}");
    // Every (type, name) pair lives whole on one shard.
    let (a, b) = (
        names_per_shard(&shards.s1).await,
        names_per_shard(&shards.s2).await,
    );
    assert_eq!(a.len() + b.len(), 10, "{a:?} {b:?}");
    assert!(a.iter().chain(&b).all(|(_, n)| *n == 5), "{a:?} {b:?}");
    assert!(!a.is_empty() && !b.is_empty());
    succeeded(proxy.psql("DROP TABLE coloc;"));

    let refused = [
        (
            "CREATE TABLE bad (a STRING, b STRING, PRIMARY KEY (a, SHARD(b)))",
            "42P16",
            "the shard key must be a prefix of the primary key",
        ),
        (
            "CREATE TABLE bad (a STRING, b uuid, PRIMARY KEY (a))",
            "42704",
            "\"uuid\" is not an Oracle NoSQL type",
        ),
        (
            "CREATE TABLE bad (a STRING, PRIMARY KEY (a)) USING TTL 5 MINUTES",
            "22023",
            "write USING TTL n HOURS or USING TTL n DAYS",
        ),
        (
            "CREATE TABLE bad (a STRING)",
            "42P16",
            "needs a PRIMARY KEY",
        ),
    ];
    for (sql, code, text) in refused {
        let stderr = failed(proxy.psql(&format!("\\set VERBOSITY verbose\n{sql};\n")));
        assert!(
            stderr.contains(&format!("ERROR:  {code}: ")),
            "{sql}: {stderr}"
        );
        assert!(stderr.contains(text), "{sql}: {stderr}");
        shards.assert_absent("bad").await;
    }

    // A child declaring a shard key, and a grandchild of a missing parent.
    succeeded(proxy.psql("CREATE TABLE parent (id LONG, PRIMARY KEY (id))"));
    let stderr = failed(proxy.psql(
        "\\set VERBOSITY verbose\nCREATE TABLE parent.kid (k LONG, PRIMARY KEY (SHARD(k)));\n",
    ));
    assert!(
        stderr.contains("42P16: a child table cannot declare a shard key"),
        "{stderr}"
    );
    let stderr = failed(proxy.psql(
        "\\set VERBOSITY verbose\nCREATE TABLE parent.nobody.kid (k LONG, PRIMARY KEY (k));\n",
    ));
    assert!(stderr.contains("42P01: "), "{stderr}");
    assert!(stderr.contains("create parent.nobody first"), "{stderr}");
    for client in [&shards.s1, &shards.s2] {
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'parent'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0);
    }
    succeeded(proxy.psql("DROP TABLE parent;"));
}

/// seeds/002's table hierarchies, three levels deep: every child and grandchild row lives on
/// its root row's shard, the grandchild is named `a.b.c` in DML as in its DDL, and a join of
/// child and grandchild on the inherited key runs on one shard only (its statement log says so).
#[tokio::test]
async fn a_three_level_hierarchy_lives_on_its_roots_shards() {
    let proxy = proxy();
    let shards = Shards::connect().await;
    log_all_statements().await;
    succeeded(proxy.psql(
        "CREATE TABLE shop (name STRING, kind STRING, PRIMARY KEY (name));
         CREATE TABLE shop.reviews (reviewId INTEGER, stars INTEGER, PRIMARY KEY (reviewId));
         CREATE TABLE shop.reviews.votes (voter STRING, useful BOOLEAN, PRIMARY KEY (voter));",
    ));
    // Each level prepends its parent's primary key to its own.
    let client = proxy.connect().await;
    let columns = rows(
        &shards.s1,
        "SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute \
         WHERE attrelid = 'shop.\"reviews.votes\"'::regclass AND attnum > 0",
    )
    .await;
    assert_eq!(columns, [["name,reviewid,voter,useful"]]);
    let mut sql = String::new();
    for p in 0..12 {
        sql.push_str(&format!("INSERT INTO shop VALUES ('p{p}', 'k');\n"));
        for r in 0..2 {
            sql.push_str(&format!(
                "INSERT INTO shop.reviews VALUES ('p{p}', {r}, 5);\n"
            ));
            for v in 0..2 {
                sql.push_str(&format!(
                    "INSERT INTO shop.reviews.votes (name, reviewId, voter) \
                     VALUES ('p{p}', {r}, 'v{v}');\n"
                ));
            }
        }
    }
    let out = succeeded(proxy.psql(&sql));
    assert_eq!(out.matches("INSERT 0 1").count(), 12 * 7, "{out}");
    // Per shard, the same product names at every level, and no name on both shards.
    let mut seen = Vec::new();
    for client in [&shards.s1, &shards.s2] {
        let names = |table: &str| {
            let sql = format!("SELECT DISTINCT name FROM {table} ORDER BY 1");
            async move { rows(client, &sql).await }
        };
        let roots = names("shop").await;
        assert_eq!(names("shop.reviews").await, roots);
        assert_eq!(names("shop.\"reviews.votes\"").await, roots);
        assert!(!roots.is_empty());
        seen.extend(roots);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 12);

    // Read back through the proxy by the three-level name, and joined on the inherited key.
    assert_eq!(
        rows(&client, "SELECT count(*) FROM shop.reviews.votes").await,
        [["48"]]
    );
    let joined = rows(
        &client,
        "SELECT r.reviewid, count(*) FROM shop.reviews r \
         JOIN shop.reviews.votes v USING (name, reviewId) \
         WHERE name = 'p3' GROUP BY 1 ORDER BY 1 /* hierarchy-join */",
    )
    .await;
    assert_eq!(joined, [["0", "2"], ["1", "2"]]);
    let all_three = rows(
        &client,
        "SELECT count(*) FROM shop JOIN shop.reviews USING (name) \
         JOIN shop.reviews.votes USING (name, reviewid) \
         WHERE name = 'p5' AND voter = 'v1' /* hierarchy-three */",
    )
    .await;
    assert_eq!(all_three, [["2"]]);
    for marker in ["hierarchy-join", "hierarchy-three"] {
        let ran = shards_that_ran(marker);
        assert_eq!(ran.len(), 1, "{marker} ran on shards {ran:?}");
    }
    // UPDATE and DELETE by the three-level name reach the row's shard.
    succeeded(proxy.psql(
        "UPDATE shop.reviews.votes SET useful = true WHERE name = 'p1' AND reviewid = 0;
         DELETE FROM shop.reviews.votes WHERE name = 'p2';",
    ));
    assert_eq!(
        rows(
            &client,
            "SELECT count(*) FILTER (WHERE useful), count(*) FROM shop.reviews.votes"
        )
        .await,
        [["2", "44"]]
    );

    // Parents go last.
    let stderr = failed(proxy.psql("DROP TABLE shop.reviews;"));
    assert!(
        stderr.contains("shop.reviews.votes") || stderr.contains("reviews.votes"),
        "{stderr}"
    );
    succeeded(
        proxy.psql("DROP TABLE shop.reviews.votes; DROP TABLE shop.reviews; DROP TABLE shop;"),
    );
    shards.assert_absent("shop").await;
}

/// How many `coloc` rows each product name has on one shard.
async fn names_per_shard(client: &Client) -> Vec<(String, i64)> {
    let rows = client
        .query(
            "SELECT productname, count(*) FROM coloc GROUP BY productname",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect()
}
