//! psql through the proxy prints exactly what psql connected straight to PostgreSQL prints.

mod common;

use common::{psql, shards, TestProxy};

/// Everything a psql user does in a session, errors included. The proxy serves it from shard 0;
/// the reference run goes straight to shard 1 (same server build and settings).
const SCRIPT: &str = r#"
\pset null '(null)'
DROP TABLE IF EXISTS psql_parity_items;
CREATE TABLE psql_parity_items (
    id int PRIMARY KEY,
    name text NOT NULL DEFAULT 'unnamed',
    price numeric(12, 3),
    tags text[],
    doc jsonb,
    created timestamptz
);
\d psql_parity_items
SELECT 42::int AS i, (-9223372036854775808)::bigint AS big, 12345678901234567890.000012345::numeric AS n,
       'grüße, 日本語, emoji 🐘, tab	end'::text AS t;
SELECT '2024-02-29 13:45:10.123456+02'::timestamptz AS ts, '1 year 2 mons 3 days 04:05:06.789'::interval AS iv,
       'infinity'::timestamptz AS inf;
SELECT '{"b": [1, 2.50, {"c": null}], "a": "ü", "n": 1e3}'::jsonb AS j, '\xdeadbeef00ff'::bytea AS b;
SELECT ARRAY[1, NULL, 3] AS ints, ARRAY['a b', NULL, '"q"', 'NULL'] AS texts, ARRAY[[1,2],[3,4]] AS matrix,
       true AS yes, false AS no, NULL::int AS nothing, NULL::text AS nothing_text;
SELECT 1/0 AS boom;
SELECT 'still here after an error' AS after_error;
BEGIN;
INSERT INTO psql_parity_items (id, name, price, tags, doc, created)
VALUES (1, 'one', 1.5, '{a,b}', '{"k": 1}', '2020-01-01 00:00:00+00'),
       (2, 'two', NULL, NULL, NULL, NULL)
RETURNING id, name, price, tags, doc, created;
COMMIT;
BEGIN;
INSERT INTO psql_parity_items (id) VALUES (3) RETURNING *;
ROLLBACK;
SELECT count(*) AS after_rollback FROM psql_parity_items;
BEGIN;
SELECT 1/0;
SELECT 'ignored in an aborted transaction';
ROLLBACK;
INSERT INTO psql_parity_items (id, name) VALUES (1, 'duplicate');
INSERT INTO psql_parity_items (id, name) VALUES (1, 'upserted'), (4, 'four')
ON CONFLICT (id) DO UPDATE SET name = excluded.name || ' (was ' || psql_parity_items.name || ')'
RETURNING id, name;
INSERT INTO psql_parity_items (id, name) VALUES (4, 'not inserted') ON CONFLICT DO NOTHING RETURNING id;
UPDATE psql_parity_items SET price = price * 2 WHERE id = 1;
DELETE FROM psql_parity_items WHERE id = 2;
COPY psql_parity_items (id, name, tags) FROM STDIN;
10	copied	{x,y}
11	tab\there	\N
\.
COPY psql_parity_items (id, name, tags) FROM STDIN;
12	bad array	not-an-array
\.
SELECT * FROM psql_parity_items ORDER BY id;
SELECT 1 AS first \; SELECT 2 AS second \; SELECT 'three' AS third;
SELECT 1 AS before_error \; SELECT 1/0 \; SELECT 3 AS never_run;
PREPARE psql_parity_q(int, text) AS SELECT $1 * 2 AS doubled, upper($2) AS shout;
EXECUTE psql_parity_q(21, 'quiet');
EXECUTE psql_parity_q(-1, 'ß');
DEALLOCATE psql_parity_q;
EXECUTE psql_parity_q(1, 'gone');
DO $$ BEGIN RAISE NOTICE 'notice with %', 'detail'; END $$;
SELECT 'x' AS "quoted ""column""", 'multi
line' AS ml;
SELECT n, n * n AS sq FROM generate_series(1, 5) AS n \gset prefix_
SELECT 99 AS answer \gset
\echo answer is :answer
\x on
SELECT 1 AS a, 'expanded' AS b;
\x off
DROP TABLE psql_parity_items;
SELECT to_regclass('psql_parity_items') IS NULL AS dropped;
"#;

#[test]
fn psql_output_through_the_proxy_matches_a_direct_connection() {
    let proxy = TestProxy::start();
    let through_proxy = proxy.psql(SCRIPT);
    let direct = psql(&shards().url(1), &[], SCRIPT);

    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (proxy_out, direct_out) = (text(&through_proxy.stdout), text(&direct.stdout));
    let (proxy_err, direct_err) = (text(&through_proxy.stderr), text(&direct.stderr));
    // The reference run must itself have exercised what the script is about.
    assert!(direct_out.contains("🐘"), "{direct_out}");
    assert!(direct_out.contains("Indexes:"), "{direct_out}");
    assert!(direct_out.contains("answer is 99"), "{direct_out}");
    assert!(direct_out.contains("copied"), "{direct_out}");
    assert!(
        direct_err.contains("malformed array literal"),
        "{direct_err}"
    );
    assert!(direct_err.contains("division by zero"), "{direct_err}");
    assert!(
        direct_err.contains("NOTICE:  notice with detail"),
        "{direct_err}"
    );

    assert_eq!(proxy_out, direct_out, "stdout differs");
    assert_eq!(proxy_err, direct_err, "stderr differs");
    assert_eq!(through_proxy.status.code(), direct.status.code());
}
