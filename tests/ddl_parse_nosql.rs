//! Oracle NoSQL CREATE TABLE examples of the seeds (copied verbatim, with the `//` and `/* */`
//! comments that precede them) through the sharding DDL parser.

mod ddl_common;

use ddl_common::{create, names, pg_types};
use shardwire::ddl::{is_sharding_ddl, parse, DdlError, Distribution, Ident, PgType, TableKind};
use tokio_postgres::error::SqlState;

// ---- seeds/003: Oracle NoSQL primary and shard keys ---------------------------------------------

const SEED_MY_PRODUCTS: &str = "CREATE TABLE myProducts (
    productName STRING,
    productType STRING,
    color ENUM (blue,green,red),
    size ENUM (small,medium,large),
    inventoryCount INTEGER,
    // Define the primary key. Every table must have one.
    PRIMARY KEY (productName)
)";

const SEED_MY_PRODUCTS_COMPOSITE_KEY: &str = "CREATE TABLE myProducts (
    productName STRING,
    productType STRING,
    color ENUM (blue,green,red),
    size ENUM (small,medium,large),
    inventoryCount INTEGER,
    // Define the primary key. Every table must have one.
    PRIMARY KEY (productName, productType)
)";

const SEED_MY_PRODUCTS_THREE_KEY_FIELDS: &str = "CREATE TABLE myProducts (
    productName STRING,
    productType STRING,
    productClass STRING,
    color ENUM (blue,green,red),
    size ENUM (small,medium,large),
    inventoryCount INTEGER,
    // Define the primary key. Every table must have one.
    PRIMARY KEY (productName, productType, productClass)
)";

#[test]
fn seed_nosql_my_products_maps_types_and_keeps_enum_names() {
    let t = create(SEED_MY_PRODUCTS);
    // STRING and ENUM are NoSQL types: a NoSQL table, sharded by its primary key.
    assert!(t.nosql && t.non_postgres_syntax);
    assert_eq!(t.kind, TableKind::Sharded);
    assert_eq!(t.distribution, Distribution::PrimaryKey);
    // No CREATE SHARDED keyword: only the parser tells NoSQL DDL from PostgreSQL's.
    assert!(!is_sharding_ddl(SEED_MY_PRODUCTS));
    assert_eq!(t.name.name().as_str(), "myproducts");
    assert_eq!(
        pg_types(&t),
        [
            ("productname", "text".to_string()),
            ("producttype", "text".into()),
            ("color", "text".into()),
            ("size", "text".into()),
            ("inventorycount", "integer".into()),
        ]
    );
    assert_eq!(
        t.column("color").unwrap().enum_values().unwrap(),
        ["blue", "green", "red"]
    );
    assert_eq!(
        t.column("size").unwrap().data_type.pg,
        PgType::Enum(vec!["small".into(), "medium".into(), "large".into()])
    );
    assert_eq!(names(&t.primary_key().unwrap().columns), ["productname"]);
}

#[test]
fn seed_nosql_composite_primary_keys() {
    let t = create(SEED_MY_PRODUCTS_COMPOSITE_KEY);
    assert_eq!(
        names(&t.primary_key().unwrap().columns),
        ["productname", "producttype"]
    );
    let t = create(SEED_MY_PRODUCTS_THREE_KEY_FIELDS);
    let pk = t.primary_key().unwrap();
    assert_eq!(
        names(&pk.columns),
        ["productname", "producttype", "productclass"]
    );
    assert_eq!(pk.shard_key_len, None);
    assert_eq!(t.kind, TableKind::Sharded);
    assert_eq!(t.distribution, Distribution::PrimaryKey);
}

/// The seed's two key fragments, `PRIMARY KEY (productType, productName, productClass)` and
/// `PRIMARY KEY (SHARD(productType, productName), productClass)`, in the seed's table.
#[test]
fn seed_nosql_shard_key_is_a_prefix_of_the_primary_key() {
    let plain = SEED_MY_PRODUCTS_THREE_KEY_FIELDS.replace(
        "PRIMARY KEY (productName, productType, productClass)",
        "PRIMARY KEY (productType, productName, productClass)",
    );
    let t = create(&plain);
    assert_eq!(
        names(&t.primary_key().unwrap().columns),
        ["producttype", "productname", "productclass"]
    );

    let sharded = SEED_MY_PRODUCTS_THREE_KEY_FIELDS.replace(
        "PRIMARY KEY (productName, productType, productClass)",
        "PRIMARY KEY (SHARD(productType, productName), productClass)",
    );
    let t = create(&sharded);
    // A shard key asks for sharding, even on a plain CREATE TABLE.
    assert_eq!(t.kind, TableKind::Sharded);
    assert_eq!(t.distribution, Distribution::PrimaryKey);
    let pk = t.primary_key().unwrap();
    assert_eq!(
        names(&pk.columns),
        ["producttype", "productname", "productclass"]
    );
    assert_eq!(pk.shard_key_len, Some(2));
    let key: Vec<_> = t
        .sharding_key()
        .unwrap()
        .into_iter()
        .map(Ident::as_str)
        .collect();
    assert_eq!(key, ["producttype", "productname"]);
}

#[test]
fn shard_key_after_another_key_column_is_rejected() {
    // "it is impossible to set productType and productClass as shard keys without also
    // specifying productName": SHARD(...) can only open the key.
    let sql = SEED_MY_PRODUCTS_THREE_KEY_FIELDS.replace(
        "PRIMARY KEY (productName, productType, productClass)",
        "PRIMARY KEY (productName, SHARD(productType), productClass)",
    );
    let err = parse(&sql).unwrap_err();
    assert!(matches!(err, DdlError::ShardKeyNotPrefix { .. }), "{err:?}");
    assert_eq!(err.sqlstate(), SqlState::INVALID_TABLE_DEFINITION);
    assert!(sql[err.position().unwrap()..].starts_with("SHARD(productType)"));
    assert!(err.to_string().contains("prefix of the primary key"));

    let twice = SEED_MY_PRODUCTS_THREE_KEY_FIELDS.replace(
        "PRIMARY KEY (productName, productType, productClass)",
        "PRIMARY KEY (SHARD(productName), SHARD(productType), productClass)",
    );
    assert!(matches!(
        parse(&twice),
        Err(DdlError::ShardKeyNotPrefix { .. })
    ));
}

#[test]
fn shard_key_in_a_family_child_is_rejected() {
    let sql = "CREATE SHARDED TABLE items (id INTEGER, order_id INTEGER,
        PRIMARY KEY (SHARD(order_id), id)) PARENT orders
        PARTITION BY CONSISTENT HASH (order_id)";
    let err = parse(sql).unwrap_err();
    // Both rules apply; the child rule is the one to fix first.
    assert!(matches!(err, DdlError::ShardKeyInChild { .. }), "{err:?}");
}

#[test]
fn shard_key_with_a_partitioning_clause_is_rejected() {
    let sql = "CREATE SHARDED TABLE t (a INTEGER, b INTEGER, PRIMARY KEY (SHARD(a), b))
        PARTITION BY CONSISTENT HASH (b) PARTITIONS AUTO";
    assert!(matches!(
        parse(sql),
        Err(DdlError::ShardKeyWithPartitioning { .. })
    ));
}

// ---- seeds/000 and 002: schemaless, fixed and hybrid tables ------------------------------------

const SEED_SCHEMALESS: &str = "// schema less, data is stored in a JSON field
CREATE TABLE audience_info (
       cookie_id LONG,
       audience_data JSON,
       PRIMARY KEY(cookie_id))";

const SEED_FIXED_SCHEMA: &str = "// fixed schema, data is stored in typed fields.
CREATE TABLE audience_info(
       cookie_id LONG,
       ipaddr STRING,
       audience_segment RECORD(sports_lover TIMESTAMP(9),
                               book_reader TIMESTAMP(9)),
       PRIMARY KEY(cookie_id));";

/// seeds/002 has the same statement without the closing semicolon.
const SEED_FIXED_SCHEMA_NO_SEMICOLON: &str = "// fixed schema, data is stored in typed fields.
CREATE TABLE audience_info(
       cookie_id LONG,
       ipaddr STRING,
       audience_segment RECORD(sports_lover TIMESTAMP(9),
                               book_reader TIMESTAMP(9)),
       PRIMARY KEY(cookie_id))";

const SEED_HYBRID: &str = "// mixed, data is stored in both typed and JSON fields.
CREATE TABLE audience_info (
       cookie_id LONG,
       ipaddr STRING,
       audience_segment JSON,
       PRIMARY KEY(cookie_id));";

const SEED_HYBRID_NO_SEMICOLON: &str = "// mixed, data is stored in both typed and JSON fields.
CREATE TABLE audience_info (
       cookie_id LONG,
       ipaddr STRING,
       audience_segment JSON,
       PRIMARY KEY(cookie_id))";

#[test]
fn seed_nosql_audience_info_tables() {
    let t = create(SEED_SCHEMALESS);
    assert_eq!(
        pg_types(&t),
        [
            ("cookie_id", "bigint".to_string()),
            ("audience_data", "jsonb".into())
        ]
    );
    assert_eq!(names(&t.primary_key().unwrap().columns), ["cookie_id"]);
    assert!(t.non_postgres_syntax);

    for sql in [SEED_FIXED_SCHEMA, SEED_FIXED_SCHEMA_NO_SEMICOLON] {
        let t = create(sql);
        assert_eq!(
            pg_types(&t),
            [
                ("cookie_id", "bigint".to_string()),
                ("ipaddr", "text".into()),
                ("audience_segment", "jsonb".into()),
            ]
        );
        assert!(t.column("audience_segment").unwrap().data_type.foreign);
    }

    for sql in [SEED_HYBRID, SEED_HYBRID_NO_SEMICOLON] {
        let t = create(sql);
        assert_eq!(
            pg_types(&t),
            [
                ("cookie_id", "bigint".to_string()),
                ("ipaddr", "text".into()),
                ("audience_segment", "jsonb".into()),
            ]
        );
    }
}

// The seeds print this statement inside a Java string, so it ends in `"` (003: `)";`,
// 002: `)"`). Verbatim, the stray quote opens an identifier that never closes, and the user
// gets PostgreSQL's error for that; without it the statement parses.
const SEED_IF_NOT_EXISTS_VERBATIM_003: &str = "/* Create a new table called users. */
CREATE TABLE if not exists myProducts 
(
  productName STRING,
  productType STRING,
  productLine INTEGER,
  PRIMARY KEY (productName)
)\";";

const SEED_IF_NOT_EXISTS_VERBATIM_002: &str = "/* Create a new table called users. */
CREATE TABLE if not exists myProducts
(
  productName STRING,
  productType STRING,
  productLine INTEGER,
  PRIMARY KEY (productName)
)\"";

#[test]
fn seed_nosql_if_not_exists_with_the_java_quote() {
    // The `"` the seeds copied out of a Java string ends a NoSQL statement harmlessly; in a
    // PostgreSQL statement it stays the unterminated identifier PostgreSQL reports.
    let pg = "CREATE TABLE t (id bigint PRIMARY KEY)\";";
    let err = parse(pg).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unterminated quoted identifier at or near \"\";\""
    );
    assert_eq!(err.sqlstate(), SqlState::SYNTAX_ERROR);
    assert_eq!(err.position(), Some(pg.len() - 2));
    for verbatim in [
        SEED_IF_NOT_EXISTS_VERBATIM_003,
        SEED_IF_NOT_EXISTS_VERBATIM_002,
    ] {
        let t = create(verbatim);
        assert!(t.nosql && t.if_not_exists, "{verbatim}");
    }
    for verbatim in [
        SEED_IF_NOT_EXISTS_VERBATIM_003,
        SEED_IF_NOT_EXISTS_VERBATIM_002,
    ] {
        let statement = &verbatim[..verbatim.rfind(')').unwrap() + 1];
        let t = create(statement);
        assert!(t.if_not_exists);
        assert_eq!(t.name.name().as_str(), "myproducts");
        assert_eq!(
            pg_types(&t),
            [
                ("productname", "text".to_string()),
                ("producttype", "text".into()),
                ("productline", "integer".into()),
            ]
        );
    }
}

#[test]
fn nosql_child_table_name_and_ttl_are_recorded() {
    let t = create(
        "CREATE TABLE myProducts.reviews (reviewId INTEGER, body STRING,
         PRIMARY KEY (reviewId)) USING TTL 5 DAYS",
    );
    assert_eq!(names(t.name.qualifier()), ["myproducts"]);
    assert_eq!(t.name.name().as_str(), "reviews");
    let ttl = t.ttl.unwrap();
    assert_eq!((ttl.amount, ttl.unit), (5, shardwire::ddl::TtlUnit::Days));
}

#[test]
fn plain_postgres_create_table_needs_no_translation() {
    // The caller hands such statements to PostgreSQL unchanged: DATE stays date there.
    let t = create("CREATE TABLE t (id bigint PRIMARY KEY, d date, j json, x double precision)");
    assert!(!t.non_postgres_syntax);
    assert_eq!(t.kind, TableKind::Plain);
}
