//! The sharding DDL parser against every DDL example of the seeds (copied verbatim), plus the
//! errors users see.

mod ddl_common;

mod seeds_004;
use ddl_common::{create, key, names, pg_types};
use seeds_004::*;
use shardwire::ddl::{
    is_sharding_ddl, parse, parse_script, AlterRowMovement, ConstraintBody, Distribution,
    PartitionBound, PartitionCount, Placement, SetMethod, Statement, TableKind, Value,
};
use shardwire::model::RowMovement;
use tokio_postgres::error::SqlState;

fn string(s: &str) -> Value {
    Value::String(s.to_string())
}

fn number(s: &str) -> Value {
    Value::Number(s.to_string())
}

fn tablespace(p: &Placement) -> (&str, bool) {
    match p {
        Placement::TablespaceSet(i) => (i.as_str(), true),
        Placement::Tablespace(i) => (i.as_str(), false),
    }
}

// ---- seeds/004: Oracle Sharding's sharding keys ------------------------------------------------

#[test]
fn seed_system_managed_customers_and_reference_partitioned_orders() {
    let statements = parse_script(SEED_CUSTOMERS_AND_ORDERS).unwrap();
    assert_eq!(statements.len(), 2);
    let Statement::CreateTable(customers) = &statements[0] else {
        panic!("not a table: {:?}", statements[0]);
    };
    assert_eq!(customers.kind, TableKind::Sharded);
    assert_eq!(customers.name.name().as_str(), "customers");
    let Distribution::ConsistentHash {
        columns,
        partitions,
    } = &customers.distribution
    else {
        panic!("expected consistent hash, got {:?}", customers.distribution);
    };
    assert_eq!(names(columns), ["cust_id", "name"]);
    assert_eq!(*partitions, PartitionCount::Auto);
    assert_eq!(key(customers), ["cust_id", "name"]);
    assert_eq!(
        customers.tablespace.as_ref().map(tablespace),
        Some(("ts1", true))
    );
    assert_eq!(
        pg_types(customers),
        [
            ("cust_id", "numeric".to_string()),
            ("name", "varchar(50)".into()),
            ("address", "varchar(250)".into()),
            ("region", "varchar(20)".into()),
            ("class", "varchar(3)".into()),
            ("signup", "date".into()),
        ]
    );
    assert!(customers.column("cust_id").unwrap().not_null());
    assert!(!customers.column("name").unwrap().not_null());
    let pk = customers.primary_key().unwrap();
    assert_eq!(names(&pk.columns), ["cust_id", "name"]);
    assert_eq!(
        customers.constraints[0].name.as_ref().unwrap().as_str(),
        "cust_pk"
    );

    let Statement::CreateTable(orders) = &statements[1] else {
        panic!("not a table: {:?}", statements[1]);
    };
    // Unquoted mixed-case names fold to lower case, so the foreign key finds `customers`.
    assert_eq!(orders.name.name().as_str(), "orders");
    match &orders.distribution {
        Distribution::Reference { constraint } => assert_eq!(constraint.as_str(), "custfk"),
        other => panic!("expected reference partitioning, got {other:?}"),
    }
    assert_eq!(orders.sharding_key(), None);
    assert_eq!(
        names(&orders.primary_key().unwrap().columns),
        ["custno", "name", "orderno"]
    );
    let fk = orders
        .constraints
        .iter()
        .find_map(|c| match &c.body {
            ConstraintBody::ForeignKey { columns, target } => Some((c, columns, target)),
            _ => None,
        })
        .unwrap();
    assert_eq!(fk.0.name.as_ref().unwrap().as_str(), "custfk");
    assert_eq!(names(fk.1), ["custno", "name"]);
    assert_eq!(fk.2.table.name().as_str(), "customers");
    assert_eq!(names(&fk.2.columns), ["cust_id", "name"]);
    assert_eq!(pg_types(orders)[3], ("orderdate", "date".to_string()));
}

#[test]
fn seed_composite_list_with_two_columns_fails_with_ora_02514() {
    let err = parse(SEED_COMPOSITE_LIST_TWO_COLUMNS).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ORA-02514: list PARTITIONSET method expects a single partitioning column"
    );
    assert_eq!(err.sqlstate(), SqlState::INVALID_TABLE_DEFINITION);
    // Oracle points at line 8, the PARTITION BY CONSISTENT HASH line.
    let position = err.position().unwrap();
    assert!(SEED_COMPOSITE_LIST_TWO_COLUMNS[position..]
        .starts_with("PARTITION BY CONSISTENT HASH (cust_id,name)"));
    assert_eq!(
        SEED_COMPOSITE_LIST_TWO_COLUMNS[..position].lines().count() + 1,
        8
    );
}

#[test]
fn seed_composite_range_with_two_columns_parses() {
    let t = create(SEED_COMPOSITE_RANGE);
    assert_eq!(t.kind, TableKind::Sharded);
    let Distribution::Composite {
        set_method,
        set_columns,
        hash_columns,
        partitions,
        partition_sets,
    } = &t.distribution
    else {
        panic!("expected composite, got {:?}", t.distribution);
    };
    assert_eq!(*set_method, SetMethod::Range);
    assert_eq!(names(set_columns), ["class", "class2"]);
    assert_eq!(names(hash_columns), ["cust_id", "name"]);
    assert_eq!(*partitions, PartitionCount::Auto);
    assert_eq!(key(&t), ["cust_id", "name"]);
    let sets: Vec<_> = partition_sets
        .iter()
        .map(|s| (s.name.as_str(), &s.bound, tablespace(&s.placement)))
        .collect();
    assert_eq!(
        sets,
        [
            (
                "silver",
                &PartitionBound::LessThan(vec![number("10"), number("100")]),
                ("ts1", true)
            ),
            (
                "gold",
                &PartitionBound::LessThan(vec![number("20"), number("200")]),
                ("ts2", true)
            ),
        ]
    );
    assert_eq!(
        names(&t.primary_key().unwrap().columns),
        ["cust_id", "name", "class"]
    );
    assert_eq!(pg_types(&t)[2], ("class", "numeric".to_string()));
}

#[test]
fn seed_user_defined_list_with_two_columns_fails_with_ora_03813() {
    let err = parse(SEED_USER_DEFINED_LIST_TWO_COLUMNS).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ORA-03813: list partition method expects a single partitioning column in user-defined sharding"
    );
    assert_eq!(err.sqlstate(), SqlState::INVALID_TABLE_DEFINITION);
    // Oracle reports it at line 1.
    assert_eq!(err.position(), Some(0));
}

#[test]
fn seed_user_defined_list_with_one_column_parses() {
    // The seed's statement with the second column removed from the key: what Oracle accepts.
    let sql = SEED_USER_DEFINED_LIST_TWO_COLUMNS.replace("LIST (state,state2)", "LIST (state)");
    let t = create(&sql);
    let Distribution::List { column, partitions } = &t.distribution else {
        panic!("expected list, got {:?}", t.distribution);
    };
    assert_eq!(column.as_str(), "state");
    assert_eq!(key(&t), ["state"]);
    assert_eq!(partitions.len(), 6);
    assert_eq!(partitions[1].name.as_str(), "p_southwest");
    assert_eq!(
        partitions[1].bound,
        PartitionBound::In(vec![
            vec![string("AZ")],
            vec![string("UT")],
            vec![string("NM")]
        ])
    );
    assert_eq!(tablespace(&partitions[5].placement), ("ts6", false));
    assert_eq!(pg_types(&t)[4], ("state", "varchar(2)".to_string()));
    assert_eq!(pg_types(&t)[6], ("status", "varchar(1)".to_string()));
    // No primary key is needed: the list column is the sharding key.
    assert!(t.primary_key().is_none());
}

#[test]
fn seed_user_defined_range_with_two_columns_parses() {
    let t = create(SEED_USER_DEFINED_RANGE);
    let Distribution::Range {
        columns,
        partitions,
    } = &t.distribution
    else {
        panic!("expected range, got {:?}", t.distribution);
    };
    assert_eq!(names(columns), ["state", "state2"]);
    let parts: Vec<_> = partitions
        .iter()
        .map(|p| (p.name.as_str(), &p.bound, tablespace(&p.placement)))
        .collect();
    assert_eq!(
        parts,
        [
            (
                "p_northwest",
                &PartitionBound::LessThan(vec![number("10"), number("100")]),
                ("ts1", false)
            ),
            (
                "p_southwest",
                &PartitionBound::LessThan(vec![number("20"), number("200")]),
                ("ts2", false)
            ),
        ]
    );
}

#[test]
fn seed_alter_table_row_movement() {
    let cases = [
        (
            "ALTER TABLE tablename ENABLE ROW MOVEMENT;",
            "tablename",
            RowMovement::Enabled,
        ),
        (
            "ALTER TABLE tablename DISABLE ROW MOVEMENT;",
            "tablename",
            RowMovement::Disabled,
        ),
        (
            "ALTER TABLE lineitems ENABLE ROW MOVEMENT;",
            "lineitems",
            RowMovement::Enabled,
        ),
        (
            "ALTER TABLE orders ENABLE ROW MOVEMENT;",
            "orders",
            RowMovement::Enabled,
        ),
        (
            "ALTER TABLE accounts ENABLE ROW MOVEMENT;",
            "accounts",
            RowMovement::Enabled,
        ),
    ];
    for (sql, table, movement) in cases {
        assert!(is_sharding_ddl(sql), "{sql}");
        match parse(sql).unwrap() {
            Statement::AlterRowMovement(AlterRowMovement {
                table: name,
                movement: m,
            }) => {
                assert_eq!(name.name().as_str(), table);
                assert_eq!(m, movement);
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
}
