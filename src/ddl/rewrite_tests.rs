use std::collections::BTreeMap;

use tokio_postgres::error::SqlState;

use super::*;
use crate::ddl::error::RewriteError;
use crate::ddl::model::*;
use crate::ddl::naming;
use crate::ddl::types::TypeOptions;
use crate::ddl::{parse, render, Statement};
use crate::model::{KeyColumn, RowMovement, ShardingMethod, TableKind};

const CUSTOMERS: &str = "CREATE SHARDED TABLE customers
(cust_id NUMBER NOT NULL, name VARCHAR2(50), class VARCHAR2(3),
 CONSTRAINT cust_pk PRIMARY KEY(cust_id, name))
PARTITION BY CONSISTENT HASH (cust_id,name) PARTITIONS AUTO TABLESPACE SET ts1";

const ORDERS: &str = "CREATE SHARDED TABLE Orders
( OrderNo NUMBER NOT NULL, CustNo NUMBER NOT NULL, Name VARCHAR2(50) NOT NULL
, CONSTRAINT OrderPK PRIMARY KEY (CustNo, Name, OrderNo)
, CONSTRAINT CustFK FOREIGN KEY (CustNo, Name) REFERENCES Customers(Cust_ID, Name))
PARTITION BY REFERENCE (CustFK)";

/// Four shards; tablespace sets ts1 = {0, 1}, ts2 = {2, 3}; tablespaces ts1..ts4 on shards 0..3.
fn ctx() -> RewriteContext {
    let s = |i| ShardId(i);
    RewriteContext {
        shards: (0..4).map(|i| format!("s{i}")).collect(),
        tablespace_sets: BTreeMap::from([
            ("ts1".into(), vec![s(0), s(1)]),
            ("ts2".into(), vec![s(2), s(3)]),
        ]),
        tablespaces: (0..4).map(|i| (format!("ts{}", i + 1), s(i))).collect(),
        chunks_per_shard: 2,
        default_schema: "public".into(),
        tables: BTreeMap::new(),
        types: TypeOptions::default(),
        default_tablespace_set: None,
    }
}

fn create(ctx: &RewriteContext, sql: &str) -> Result<TablePlan, RewriteError> {
    let Ok(Statement::CreateTable(t)) = parse(sql) else {
        panic!("not a CREATE TABLE: {sql}");
    };
    match rewrite_create(ctx, &t)? {
        CreateOutcome::Create(plan) => Ok(*plan),
        other => panic!("unexpected {other:?}"),
    }
}

/// Creates `sql` and records it in `ctx`, as the catalog would.
fn add(ctx: &mut RewriteContext, sql: &str) -> TablePlan {
    let plan = create(ctx, sql).unwrap();
    ctx.tables
        .insert(plan.layout.name.clone(), plan.layout.clone());
    plan
}

fn shard(plan: &TablePlan, i: u32) -> Vec<&str> {
    plan.per_shard[&ShardId(i)]
        .iter()
        .map(String::as_str)
        .collect()
}

fn err(ctx: &RewriteContext, sql: &str) -> RewriteError {
    create(ctx, sql).expect_err("must fail")
}

#[test]
fn consistent_hash_spreads_chunks_round_robin_over_the_tablespace_set() {
    let plan = create(&ctx(), CUSTOMERS).unwrap();
    assert_eq!(
        plan.per_shard.keys().copied().collect::<Vec<_>>(),
        [ShardId(0), ShardId(1)]
    );
    let top = "CREATE TABLE \"public\".\"customers\" (\"cust_id\" numeric NOT NULL, \"name\" varchar(50), \"class\" varchar(3), CONSTRAINT \"cust_pk\" PRIMARY KEY (\"cust_id\", \"name\")) PARTITION BY HASH (\"cust_id\", \"name\")";
    assert_eq!(
        shard(&plan, 0),
        [
            top,
            "CREATE TABLE \"public\".\"customers_c0\" PARTITION OF \"public\".\"customers\" FOR VALUES WITH (MODULUS 4, REMAINDER 0)",
            "CREATE TABLE \"public\".\"customers_c2\" PARTITION OF \"public\".\"customers\" FOR VALUES WITH (MODULUS 4, REMAINDER 2)",
        ]
    );
    assert_eq!(shard(&plan, 1)[1..].len(), 2);
    assert!(shard(&plan, 1)[2].ends_with("(MODULUS 4, REMAINDER 3)"));
    let l = &plan.layout;
    assert_eq!(l.kind, TableKind::Sharded);
    assert_eq!(l.method, Some(ShardingMethod::ConsistentHash));
    assert_eq!(l.chunks.as_ref().unwrap()[..], [0, 1, 0, 1].map(ShardId));
    assert_eq!(l.tablespace_set.as_deref(), Some("ts1"));
    assert_eq!(
        l.key,
        [("cust_id", "numeric"), ("name", "varchar(50)")].map(|(n, t)| KeyColumn {
            name: n.into(),
            pg_type: t.into()
        })
    );
    assert_eq!(plan.row_movement, RowMovement::Disabled);
}

#[test]
fn partitions_n_and_default_set_use_every_shard() {
    let plan = create(
        &ctx(),
        "CREATE SHARDED TABLE t (id bigint PRIMARY KEY) PARTITION BY CONSISTENT HASH (id) PARTITIONS 6",
    )
    .unwrap();
    assert_eq!(plan.layout.shards, [0, 1, 2, 3].map(ShardId));
    assert_eq!(plan.layout.chunks.as_ref().unwrap().len(), 6);
    // Chunks 0 and 4 on shard 0, 1 and 5 on shard 1, 2 on shard 2, 3 on shard 3.
    assert_eq!(shard(&plan, 0).len(), 3);
    assert_eq!(shard(&plan, 3).len(), 2);
    assert!(shard(&plan, 3)[1].contains("\"t_c3\""));
}

#[test]
fn fewer_chunks_than_shards_leave_the_chunkless_shards_out() {
    let plan = create(
        &ctx(),
        "CREATE SHARDED TABLE t (id bigint PRIMARY KEY) PARTITION BY CONSISTENT HASH (id) PARTITIONS 3",
    )
    .unwrap();
    assert_eq!(plan.layout.shards, [0, 1, 2].map(ShardId));
    assert!(!plan.per_shard.contains_key(&ShardId(3)));
}

#[test]
fn composite_table_lives_only_where_its_partition_sets_have_chunks() {
    let plan = create(
        &ctx(),
        "CREATE SHARDED TABLE c (id int, class varchar(3), PRIMARY KEY (id, class))
         PARTITIONSET BY LIST (class) PARTITION BY CONSISTENT HASH (id) PARTITIONS 2
         (PARTITIONSET silver VALUES ('SLV') TABLESPACE SET ts2)",
    )
    .unwrap();
    assert_eq!(plan.layout.shards, [2, 3].map(ShardId));
    assert_eq!(
        plan.per_shard.keys().copied().collect::<Vec<_>>(),
        [2, 3].map(ShardId)
    );
}

#[test]
fn reference_child_is_partitioned_like_its_root_and_keeps_its_foreign_key() {
    let mut c = ctx();
    let root = add(&mut c, CUSTOMERS);
    let plan = create(&c, ORDERS).unwrap();
    let l = &plan.layout;
    assert_eq!(l.chunks, root.layout.chunks);
    assert_eq!(l.shards, root.layout.shards);
    let family = l.family.as_ref().unwrap();
    assert_eq!(family.root, QualifiedName::new("public", "customers"));
    assert_eq!(family.parent, family.root);
    assert_eq!(
        family.column_map,
        [
            ("custno".into(), "cust_id".into()),
            ("name".into(), "name".into())
        ]
    );
    assert_eq!(
        shard(&plan, 1),
        [
            "CREATE TABLE \"public\".\"orders\" (\"orderno\" numeric NOT NULL, \"custno\" numeric NOT NULL, \"name\" varchar(50) NOT NULL, CONSTRAINT \"orderpk\" PRIMARY KEY (\"custno\", \"name\", \"orderno\"), CONSTRAINT \"custfk\" FOREIGN KEY (\"custno\", \"name\") REFERENCES \"public\".\"customers\" (\"cust_id\", \"name\")) PARTITION BY HASH (\"custno\", \"name\")",
            "CREATE TABLE \"public\".\"orders_c1\" PARTITION OF \"public\".\"orders\" FOR VALUES WITH (MODULUS 4, REMAINDER 1)",
            "CREATE TABLE \"public\".\"orders_c3\" PARTITION OF \"public\".\"orders\" FOR VALUES WITH (MODULUS 4, REMAINDER 3)",
        ]
    );
}

#[test]
fn families_nest_three_levels_and_parent_clause_maps_columns_in_order() {
    let mut c = ctx();
    add(&mut c, "CREATE SHARDED TABLE accounts (id integer PRIMARY KEY) PARTITION BY CONSISTENT HASH (id) PARTITIONS 3");
    add(&mut c, "CREATE SHARDED TABLE orders (acct bigint, no int, PRIMARY KEY (acct, no), CONSTRAINT fk FOREIGN KEY (acct) REFERENCES accounts (id)) PARTITION BY REFERENCE (fk)");
    let items = add(&mut c, "CREATE SHARDED TABLE lineitems (a int, o int, line int, PRIMARY KEY (a, o, line), CONSTRAINT fk FOREIGN KEY (a, o) REFERENCES orders) PARTITION BY REFERENCE (fk)");
    let f = items.layout.family.as_ref().unwrap();
    assert_eq!(f.root.name, "accounts");
    assert_eq!(f.parent.name, "orders");
    assert_eq!(f.column_map, [("a".into(), "id".into())]);
    assert!(shard(&items, 2)[0].ends_with("PARTITION BY HASH (\"a\")"));
    assert!(shard(&items, 2)[0].contains("REFERENCES \"public\".\"orders\" (\"acct\", \"no\")"));
    assert!(shard(&items, 2)[1].contains("\"lineitems_c2\""));

    let notes = add(&mut c, "CREATE SHARDED TABLE notes (acct_id int, n int, PRIMARY KEY (acct_id, n)) PARENT accounts PARTITION BY CONSISTENT HASH (acct_id)");
    assert_eq!(
        notes.layout.family.as_ref().unwrap().column_map,
        [("acct_id".into(), "id".into())]
    );
    assert_eq!(notes.layout.chunks.as_ref().unwrap().len(), 3);
}

#[test]
fn partition_by_reference_names_an_unnamed_foreign_key_as_postgresql_names_it() {
    let mut c = ctx();
    add(&mut c, "CREATE SHARDED TABLE accounts (id integer PRIMARY KEY) PARTITION BY CONSISTENT HASH (id) PARTITIONS 3");
    let orders = add(&mut c, "CREATE SHARDED TABLE orders (acct bigint, no int, PRIMARY KEY (acct, no), FOREIGN KEY (acct) REFERENCES accounts (id)) PARTITION BY REFERENCE (orders_acct_fkey)");
    let f = orders.layout.family.as_ref().unwrap();
    assert_eq!(f.root.name, "accounts");
    assert_eq!(f.column_map, [("acct".into(), "id".into())]);
    // The shards get the constraint unnamed, and name it the same.
    assert!(!shard(&orders, 0)[0].contains("CONSTRAINT"));
    // A second unnamed key on the same columns is PostgreSQL's `…_fkey1`.
    let notes = add(&mut c, "CREATE SHARDED TABLE notes (acct bigint PRIMARY KEY, FOREIGN KEY (acct) REFERENCES accounts (id), FOREIGN KEY (acct) REFERENCES accounts (id)) PARTITION BY REFERENCE (notes_acct_fkey1)");
    assert_eq!(notes.layout.family.as_ref().unwrap().root.name, "accounts");
    let refused = parse("CREATE SHARDED TABLE memos (acct bigint PRIMARY KEY, FOREIGN KEY (acct) REFERENCES accounts (id)) PARTITION BY REFERENCE (memos_fkey)");
    let e = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("must name a FOREIGN KEY constraint"), "{e}");
}

const COMPOSITE_RANGE: &str = "CREATE SHARDED TABLE customers (
cust_id     NUMBER NOT NULL,
Name    VARCHAR2(50) NOT NULL,
class number NOT NULL ,
class2 number not null,
CONSTRAINT cust_pk PRIMARY KEY(cust_id,name,class))
PARTITIONSET BY RANGE (class, class2)
PARTITION BY CONSISTENT HASH (cust_id,name)
PARTITIONS AUTO (
PARTITIONSET silver VALUES LESS THAN (10,100) TABLESPACE SET ts1,
PARTITIONSET gold   VALUES LESS THAN (20,200) TABLESPACE SET ts2)";

#[test]
fn composite_range_puts_constraints_lacking_the_set_key_on_each_partition_set() {
    let plan = create(&ctx(), COMPOSITE_RANGE).unwrap();
    let l = &plan.layout;
    assert_eq!(l.method, Some(ShardingMethod::CompositeRange));
    assert_eq!(l.shards, [0, 1, 2, 3].map(ShardId));
    assert_eq!(
        shard(&plan, 0),
        [
            "CREATE TABLE \"public\".\"customers\" (\"cust_id\" numeric NOT NULL, \"name\" varchar(50) NOT NULL, \"class\" numeric NOT NULL, \"class2\" numeric NOT NULL) PARTITION BY RANGE (\"class\", \"class2\")",
            "CREATE TABLE \"public\".\"customers_silver\" PARTITION OF \"public\".\"customers\" (CONSTRAINT \"cust_pk_silver\" PRIMARY KEY (\"cust_id\", \"name\", \"class\")) FOR VALUES FROM (MINVALUE, MINVALUE) TO (10, 100) PARTITION BY HASH (\"cust_id\", \"name\")",
            "CREATE TABLE \"public\".\"customers_silver_c0\" PARTITION OF \"public\".\"customers_silver\" FOR VALUES WITH (MODULUS 4, REMAINDER 0)",
            "CREATE TABLE \"public\".\"customers_silver_c2\" PARTITION OF \"public\".\"customers_silver\" FOR VALUES WITH (MODULUS 4, REMAINDER 2)",
        ]
    );
    assert!(shard(&plan, 2)[1].contains("\"cust_pk_gold\""));
    assert!(shard(&plan, 2)[1].contains("FOR VALUES FROM (10, 100) TO (20, 200)"));
    assert_eq!(
        l.partitions[1].bound_sql,
        "FOR VALUES FROM (10, 100) TO (20, 200)"
    );
}

#[test]
fn composite_list_keeps_a_constraint_that_contains_the_set_key_on_the_top_table() {
    let plan = create(
        &ctx(),
        "CREATE SHARDED TABLE c (id int, class varchar(3), PRIMARY KEY (id, class))
         PARTITIONSET BY LIST (class) PARTITION BY CONSISTENT HASH (id) PARTITIONS 2
         (PARTITIONSET silver VALUES ('SLV', 'BRZ') TABLESPACE SET ts1,
          PARTITIONSET gold VALUES ('GLD') TABLESPACE SET ts2)",
    )
    .unwrap();
    assert_eq!(
        shard(&plan, 3),
        [
            "CREATE TABLE \"public\".\"c\" (\"id\" integer, \"class\" varchar(3), PRIMARY KEY (\"id\", \"class\")) PARTITION BY LIST (\"class\")",
            "CREATE TABLE \"public\".\"c_gold\" PARTITION OF \"public\".\"c\" FOR VALUES IN ('GLD') PARTITION BY HASH (\"id\")",
            "CREATE TABLE \"public\".\"c_gold_c1\" PARTITION OF \"public\".\"c_gold\" FOR VALUES WITH (MODULUS 2, REMAINDER 1)",
        ]
    );
}

#[test]
fn user_defined_range_places_partitions_and_the_table_by_tablespace() {
    let plan = create(
        &ctx(),
        "CREATE SHARDED TABLE accounts (id NUMBER, state NUMBER NOT NULL, state2 NUMBER NOT NULL)
         PARTITION BY RANGE (state, state2)
         ( PARTITION p_northwest VALUES LESS THAN(10, 100) TABLESPACE ts1
         , PARTITION p_southwest VALUES LESS THAN(MAXVALUE, 5) TABLESPACE ts2)",
    )
    .unwrap();
    assert_eq!(
        shard(&plan, 1),
        [
            "CREATE TABLE \"public\".\"accounts\" (\"id\" numeric, \"state\" numeric NOT NULL, \"state2\" numeric NOT NULL) PARTITION BY RANGE (\"state\", \"state2\")",
            "CREATE TABLE \"public\".\"accounts_p_southwest\" PARTITION OF \"public\".\"accounts\" FOR VALUES FROM (10, 100) TO (MAXVALUE, MAXVALUE)",
        ]
    );
    // A shard without partitions gets nothing: DROP goes where the catalog places the table.
    assert_eq!(plan.layout.shards, [0, 1].map(ShardId));
    assert_eq!(
        plan.per_shard.keys().copied().collect::<Vec<_>>(),
        [0, 1].map(ShardId)
    );
    assert_eq!(
        plan.layout.partitions[0].placement,
        PartitionPlacement::Tablespace {
            name: "ts1".into(),
            shard: ShardId(0)
        }
    );
}

#[test]
fn user_defined_list_quotes_values_and_maps_default() {
    let plan = create(
        &ctx(),
        "CREATE SHARDED TABLE a (state varchar(20) PRIMARY KEY) PARTITION BY LIST (state)
         (PARTITION p1 VALUES ('OR', 'it''s', 'a\\b') TABLESPACE ts1,
          PARTITION p2 VALUES (DEFAULT) TABLESPACE ts2)",
    )
    .unwrap();
    assert_eq!(
        shard(&plan, 0)[1],
        "CREATE TABLE \"public\".\"a_p1\" PARTITION OF \"public\".\"a\" FOR VALUES IN ('OR', 'it''s', E'a\\\\b')"
    );
    assert_eq!(
        shard(&plan, 1)[1],
        "CREATE TABLE \"public\".\"a_p2\" PARTITION OF \"public\".\"a\" DEFAULT"
    );
}

#[test]
fn duplicated_goes_everywhere_and_unsharded_to_the_first_shard() {
    let dup = create(
        &ctx(),
        "CREATE DUPLICATED TABLE products (id NUMBER PRIMARY KEY, name VARCHAR2(20))",
    )
    .unwrap();
    assert_eq!(dup.layout.kind, TableKind::Duplicated);
    assert_eq!(dup.per_shard.len(), 4);
    assert_eq!(
        shard(&dup, 2),
        ["CREATE TABLE \"public\".\"products\" (\"id\" numeric, \"name\" varchar(20), PRIMARY KEY (\"id\"))"]
    );
    let plain = create(
        &ctx(),
        "CREATE TABLE orders (id NUMBER(10) PRIMARY KEY, note VARCHAR2(20))",
    )
    .unwrap();
    assert_eq!(plain.layout.kind, TableKind::Unsharded);
    assert_eq!(
        plain.per_shard,
        BTreeMap::from([(ShardId(0), vec!["CREATE TABLE \"public\".\"orders\" (\"id\" numeric(10), \"note\" varchar(20), PRIMARY KEY (\"id\"))".to_owned()])])
    );
}

#[test]
fn nosql_shard_key_and_primary_key_sharding() {
    let plan = create(
        &ctx(),
        "CREATE TABLE p (a STRING, b STRING, c INTEGER, PRIMARY KEY (SHARD(a, b), c))",
    )
    .unwrap();
    assert_eq!(plan.layout.method, Some(ShardingMethod::ConsistentHash));
    // The rows go in a data table with the expiry column; the table's name is a view.
    assert_eq!(
        shard(&plan, 0)[..2],
        [
            "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('shardwire.schema.public$rows'))",
            "CREATE SCHEMA IF NOT EXISTS \"public$rows\""
        ]
    );
    assert!(shard(&plan, 0)[2].starts_with("CREATE TABLE \"public$rows\".\"p\" ("));
    assert!(shard(&plan, 0)[2].ends_with(
        "\"$expires\" timestamptz, PRIMARY KEY (\"a\", \"b\", \"c\")) PARTITION BY HASH (\"a\", \"b\")"
    ));
    assert!(shard(&plan, 0)
        .iter()
        .any(|s| s.starts_with("DO ") && s.contains("CREATE VIEW")));
    assert_eq!(plan.layout.chunks.as_ref().unwrap().len(), 8);
    let by_pk = create(
        &ctx(),
        "CREATE SHARDED TABLE q (k text, v text, PRIMARY KEY (k))",
    )
    .unwrap();
    assert!(shard(&by_pk, 1)[0].ends_with("PARTITION BY HASH (\"k\")"));
}

#[test]
fn nosql_child_inherits_the_parent_key_and_may_not_declare_one() {
    let mut c = ctx();
    add(
        &mut c,
        "CREATE TABLE p (a STRING, b INTEGER, PRIMARY KEY (SHARD(a), b))",
    );
    let child = create(
        &c,
        "CREATE TABLE p.kid (id INTEGER, d STRING, PRIMARY KEY (id))",
    )
    .unwrap();
    assert_eq!(child.layout.name, QualifiedName::new("p", "kid"));
    assert_eq!(
        shard(&child, 0)[..5],
        [
            "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('shardwire.schema.p'))",
            "CREATE SCHEMA IF NOT EXISTS \"p\"",
            "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('shardwire.schema.p$rows'))",
            "CREATE SCHEMA IF NOT EXISTS \"p$rows\"",
            "CREATE TABLE \"p$rows\".\"kid\" (\"a\" text, \"b\" integer, \"id\" integer, \"d\" text, \"$expires\" timestamptz, PRIMARY KEY (\"a\", \"b\", \"id\")) PARTITION BY HASH (\"a\")",
        ]
    );
    assert_eq!(child.layout.family.as_ref().unwrap().root.name, "p");
    let e = err(
        &c,
        "CREATE TABLE p.kid2 (id INTEGER, PRIMARY KEY (SHARD(id)))",
    );
    assert!(matches!(e, RewriteError::NoSqlChildShardKey { .. }), "{e}");
    assert_eq!(e.sqlstate(), SqlState::INVALID_TABLE_DEFINITION);
}

#[test]
fn primary_and_unique_keys_must_contain_the_sharding_key() {
    let e = err(&ctx(), "CREATE SHARDED TABLE t (a int, b int, CONSTRAINT pk PRIMARY KEY (a)) PARTITION BY CONSISTENT HASH (a, b)");
    assert_eq!(e.sqlstate(), SqlState::INVALID_TABLE_DEFINITION);
    assert_eq!(e.to_string(), "primary key \"pk\" of sharded table \"public\".\"t\" must contain the sharding key columns (a, b); missing: b");
    let e = err(
        &ctx(),
        "CREATE SHARDED TABLE t (a int, b int, UNIQUE (b)) PARTITION BY CONSISTENT HASH (a)",
    );
    assert!(
        matches!(&e, RewriteError::KeyNotInConstraint { missing, .. } if missing == &["a"]),
        "{e}"
    );
    let mut c = ctx();
    add(&mut c, CUSTOMERS);
    let e = err(&c, "CREATE SHARDED TABLE o (n int, cid NUMBER, nm VARCHAR2(50), PRIMARY KEY (n, cid), CONSTRAINT fk FOREIGN KEY (cid, nm) REFERENCES customers) PARTITION BY REFERENCE (fk)");
    assert!(
        matches!(&e, RewriteError::KeyNotInConstraint { missing, .. } if missing == &["nm"]),
        "{e}"
    );
}

#[test]
fn foreign_keys_stay_inside_one_family_and_cover_the_key() {
    let mut c = ctx();
    add(&mut c, CUSTOMERS);
    add(
        &mut c,
        "CREATE SHARDED TABLE other (id int PRIMARY KEY) PARTITION BY CONSISTENT HASH (id)",
    );
    add(
        &mut c,
        "CREATE DUPLICATED TABLE products (id int PRIMARY KEY)",
    );
    add(
        &mut c,
        "CREATE TABLE local (id INTEGER, PRIMARY KEY (SHARD(id)))",
    );
    add(
        &mut c,
        "CREATE TABLE plain (id VARCHAR2(10), PRIMARY KEY (id))",
    );

    let e = err(&c, "CREATE SHARDED TABLE x (id int PRIMARY KEY, o int REFERENCES other (id)) PARTITION BY CONSISTENT HASH (id)");
    assert!(
        matches!(e, RewriteError::ForeignKeyOutsideFamily { .. }),
        "{e}"
    );
    assert_eq!(e.sqlstate(), SqlState::INVALID_FOREIGN_KEY);

    let e = err(&c, "CREATE SHARDED TABLE x (id int PRIMARY KEY, p int REFERENCES products (id)) PARTITION BY CONSISTENT HASH (id)");
    assert!(
        matches!(&e, RewriteError::ShardedToUnshardedOrDuplicated { target_kind: TableKind::Duplicated, columns, .. } if columns == &["p"]),
        "{e}"
    );
    let e = err(&c, "CREATE SHARDED TABLE x (id int PRIMARY KEY, p text REFERENCES plain (id)) PARTITION BY CONSISTENT HASH (id)");
    assert!(
        matches!(
            &e,
            RewriteError::ShardedToUnshardedOrDuplicated {
                target_kind: TableKind::Unsharded,
                ..
            }
        ),
        "{e}"
    );
    let e = err(
        &c,
        "CREATE DUPLICATED TABLE d (id int PRIMARY KEY, o int REFERENCES other (id))",
    );
    assert!(
        matches!(
            &e,
            RewriteError::ReferenceAcrossKinds {
                kind: TableKind::Duplicated,
                target_kind: TableKind::Sharded,
                ..
            }
        ),
        "{e}"
    );
    create(
        &c,
        "CREATE DUPLICATED TABLE d (id int PRIMARY KEY, p int REFERENCES products (id))",
    )
    .unwrap();

    // The reference child must cover the whole root key.
    let e = err(&c, "CREATE SHARDED TABLE o (n int, cid NUMBER, PRIMARY KEY (cid, n), CONSTRAINT fk FOREIGN KEY (cid) REFERENCES customers (cust_id)) PARTITION BY REFERENCE (fk)");
    assert!(
        matches!(&e, RewriteError::ForeignKeyMissesKey { missing, .. } if missing == &["name"]),
        "{e}"
    );
    // A self-reference of a sharded table must stay on one shard.
    let e = err(&c, "CREATE SHARDED TABLE emp (id int PRIMARY KEY, boss int REFERENCES emp (id)) PARTITION BY CONSISTENT HASH (id)");
    assert!(matches!(e, RewriteError::ForeignKeyMissesKey { .. }), "{e}");
    // A second foreign key inside the family is fine when it covers the key.
    let mut c2 = c.clone();
    add(&mut c2, ORDERS);
    create(&c2, "CREATE SHARDED TABLE notes (cid NUMBER, nm VARCHAR2(50), o NUMBER, PRIMARY KEY (cid, nm, o),
        CONSTRAINT fk FOREIGN KEY (cid, nm) REFERENCES customers (cust_id, name),
        CONSTRAINT fo FOREIGN KEY (cid, nm, o) REFERENCES orders (custno, name, orderno)) PARTITION BY REFERENCE (fk)").unwrap();
    let e = err(&c2, "CREATE SHARDED TABLE notes (cid NUMBER, nm VARCHAR2(50), o NUMBER, c2 NUMBER, PRIMARY KEY (cid, nm, o),
        CONSTRAINT fk FOREIGN KEY (cid, nm) REFERENCES customers (cust_id, name),
        CONSTRAINT fo FOREIGN KEY (c2, nm, o) REFERENCES orders (custno, name, orderno)) PARTITION BY REFERENCE (fk)");
    assert!(
        matches!(&e, RewriteError::ForeignKeyMissesKey { missing, .. } if missing == &["custno"]),
        "{e}"
    );
}

#[test]
fn a_child_key_must_hash_like_the_root_key() {
    let mut c = ctx();
    add(
        &mut c,
        "CREATE SHARDED TABLE r (id bigint PRIMARY KEY) PARTITION BY CONSISTENT HASH (id)",
    );
    create(&c, "CREATE SHARDED TABLE k (rid integer PRIMARY KEY, CONSTRAINT fk FOREIGN KEY (rid) REFERENCES r) PARTITION BY REFERENCE (fk)").unwrap();
    let e = err(&c, "CREATE SHARDED TABLE k (rid numeric PRIMARY KEY, CONSTRAINT fk FOREIGN KEY (rid) REFERENCES r) PARTITION BY REFERENCE (fk)");
    assert!(matches!(e, RewriteError::KeyTypeMismatch { .. }), "{e}");
    assert_eq!(e.sqlstate(), SqlState::DATATYPE_MISMATCH);
    let e = err(
        &ctx(),
        "CREATE SHARDED TABLE j (d jsonb PRIMARY KEY) PARTITION BY CONSISTENT HASH (d)",
    );
    assert!(matches!(e, RewriteError::UnhashableKey { .. }), "{e}");
}

#[test]
fn existing_tables_and_unknown_placements_are_errors() {
    let mut c = ctx();
    add(&mut c, CUSTOMERS);
    let e = err(&c, CUSTOMERS);
    assert_eq!(e.sqlstate(), SqlState::DUPLICATE_TABLE);
    let Ok(Statement::CreateTable(t)) =
        parse(&CUSTOMERS.replace("TABLE customers", "TABLE IF NOT EXISTS customers"))
    else {
        panic!()
    };
    assert_eq!(
        rewrite_create(&c, &t).unwrap(),
        CreateOutcome::AlreadyExists(QualifiedName::new("public", "customers"))
    );
    let e = err(&ctx(), &CUSTOMERS.replace("SET ts1", "SET nope"));
    assert_eq!(e.sqlstate(), SqlState::UNDEFINED_OBJECT);
    assert!(
        e.to_string()
            .contains("tablespace set \"nope\" does not exist"),
        "{e}"
    );
    let e = err(&ctx(), "CREATE SHARDED TABLE a (s int PRIMARY KEY) PARTITION BY LIST (s) (PARTITION p VALUES (1) TABLESPACE tbsx)");
    assert_eq!(
        e,
        RewriteError::UndefinedTablespace {
            name: "tbsx".into()
        }
    );
    assert_eq!(e.sqlstate(), SqlState::UNDEFINED_OBJECT);
    let e = err(&ctx(), ORDERS);
    assert_eq!(e.sqlstate(), SqlState::UNDEFINED_TABLE);
    let mut c2 = c.clone();
    add(&mut c2, ORDERS);
    let e = err(&c2, "CREATE SHARDED TABLE x (cust_id NUMBER, name VARCHAR2(50), PRIMARY KEY (cust_id, name)) PARENT customers PARTITION BY CONSISTENT HASH (cust_id, name) TABLESPACE SET ts2");
    assert!(matches!(e, RewriteError::ChildPlacement { .. }), "{e}");
}

#[test]
fn drop_refuses_a_parent_with_children_and_index_goes_where_the_table_is() {
    let mut c = ctx();
    let customers = add(&mut c, CUSTOMERS);
    add(&mut c, ORDERS);
    let name = QualifiedName::new("public", "customers");
    let e = drop_table(&c, &name).unwrap_err();
    assert_eq!(e.sqlstate(), SqlState::DEPENDENT_OBJECTS_STILL_EXIST);
    let orders = QualifiedName::new("public", "orders");
    assert_eq!(
        drop_table(&c, &orders).unwrap(),
        BTreeMap::from([
            (
                ShardId(0),
                vec!["DROP TABLE \"public\".\"orders\"".to_owned()]
            ),
            (
                ShardId(1),
                vec!["DROP TABLE \"public\".\"orders\"".to_owned()]
            ),
        ])
    );
    let sql = "CREATE INDEX ON customers (class)";
    assert_eq!(
        passthrough(&customers.layout, sql)
            .into_keys()
            .collect::<Vec<_>>(),
        [ShardId(0), ShardId(1)]
    );
    assert_eq!(
        drop_table(&c, &QualifiedName::new("public", "nope"))
            .unwrap_err()
            .sqlstate(),
        SqlState::UNDEFINED_TABLE
    );
}

#[test]
fn long_partition_names_stay_within_63_bytes_and_distinct() {
    let a = "a".repeat(60) + "x";
    let b = "a".repeat(60) + "y";
    let na = naming::partition_relation(&a, "c12");
    let nb = naming::partition_relation(&b, "c12");
    assert!(na.len() <= 63 && nb.len() <= 63);
    assert!(na.ends_with("_c12"));
    assert_ne!(na, nb);
    assert_eq!(naming::partition_relation("t", "c1"), "t_c1");
    assert_eq!(render::quote_ident("We\"ird"), "\"We\"\"ird\"");
}
