//! The rest of the sharding DDL grammar: tablespace sets, families, duplicated tables, type
//! mapping, expressions kept as source text, identifiers, comments and error reporting.

mod ddl_common;

use ddl_common::{create, names};
use shardwire::ddl::{
    is_sharding_ddl, parse, ColumnConstraintBody, ConstraintBody, DdlError, Distribution, Ident,
    PartitionBound, PartitionCount, Placement, ReferentialAction, Statement, TableKind, Value,
};
use shardwire::model::RowMovement;
use tokio_postgres::error::SqlState;

fn mapped(sql_type: &str) -> String {
    let t = create(&format!(
        "CREATE SHARDED TABLE t (k {sql_type}, PRIMARY KEY (k))"
    ));
    t.columns[0].data_type.pg.to_string()
}

#[test]
fn oracle_and_nosql_types_map_to_postgres() {
    let cases = [
        ("NUMBER", "numeric"),
        ("NUMBER(10)", "numeric(10)"),
        ("number(10, 2)", "numeric(10,2)"),
        ("NUMBER(*, 0)", "numeric(38,0)"),
        ("NUMBER(5,-2)", "numeric(5,-2)"),
        ("INTEGER", "integer"),
        ("INT", "integer"),
        ("SMALLINT", "smallint"),
        ("VARCHAR2(50 BYTE)", "varchar(50)"),
        ("VARCHAR2(50 CHAR)", "varchar(50)"),
        ("NVARCHAR2(20)", "varchar(20)"),
        ("VARCHAR(2)", "varchar(2)"),
        ("CHAR(3)", "char(3)"),
        ("NCHAR(3)", "char(3)"),
        ("CHAR", "char"),
        // PostgreSQL's meaning unless `[ddl] oracle_date` (applied by the rewrite).
        ("DATE", "date"),
        ("DATE[]", "date[]"),
        ("TIMESTAMP", "timestamp"),
        ("TIMESTAMP(9)", "timestamp(6)"),
        ("TIMESTAMP(3)", "timestamp(3)"),
        ("TIMESTAMP(9) WITH TIME ZONE", "timestamptz(6)"),
        ("TIMESTAMP WITH LOCAL TIME ZONE", "timestamptz"),
        ("RAW(16)", "bytea"),
        ("LONG RAW", "bytea"),
        ("BLOB", "bytea"),
        ("BINARY(8)", "bytea"),
        ("CLOB", "text"),
        ("NCLOB", "text"),
        ("LONG", "bigint"),
        ("STRING", "text"),
        ("JSON", "jsonb"),
        ("BINARY_FLOAT", "real"),
        ("BINARY_DOUBLE", "double precision"),
        ("FLOAT", "double precision"),
        ("FLOAT(126)", "double precision"),
        ("DOUBLE", "double precision"),
        ("BOOLEAN", "boolean"),
        ("ARRAY(INTEGER)", "integer[]"),
        ("ARRAY(ENUM(a, b))", "text[]"),
        ("ARRAY(MAP(LONG))", "jsonb"),
        ("MAP(STRING)", "jsonb"),
        ("RECORD(a INTEGER, b ARRAY(STRING))", "jsonb"),
        ("ENUM(a, b)", "text"),
        // PostgreSQL's own names pass through as written.
        ("text", "text"),
        ("bigint", "bigint"),
        ("double precision", "double precision"),
        ("character varying(10)", "varchar(10)"),
        ("timestamptz", "timestamptz"),
        ("time(3) with time zone", "time(3) with time zone"),
        ("interval day to second", "interval day to second"),
        ("int[]", "integer[]"),
        ("NUMBER(4) ARRAY[2]", "numeric(4) ARRAY[2]"),
        ("text[][]", "text[][]"),
        ("numeric(12,2)[3]", "numeric(12,2)[3]"),
        ("public.my_type", "public.my_type"),
        ("\"MyType\"", "\"MyType\""),
        ("uuid", "uuid"),
    ];
    for (written, expected) in cases {
        assert_eq!(mapped(written), expected, "{written}");
    }
}

#[test]
fn foreign_type_flag_marks_what_postgres_rejects() {
    let t = create(
        "CREATE SHARDED TABLE t (a NUMBER, b integer, c DATE, d DOUBLE, e double precision, \
         PRIMARY KEY (a))",
    );
    let foreign: Vec<bool> = t.columns.iter().map(|c| c.data_type.foreign).collect();
    assert_eq!(foreign, [true, false, false, true, false]);
    assert_eq!(t.columns[0].data_type.source, "NUMBER");
}

#[test]
fn defaults_and_checks_keep_their_source_text() {
    let t = create(
        "CREATE SHARDED TABLE t (
           id NUMBER CONSTRAINT id_nn NOT NULL PRIMARY KEY,
           created TIMESTAMP DEFAULT now() NOT NULL,
           status VARCHAR2(1) DEFAULT 'A' CHECK (status IN ('A', 'B')),
           amount NUMBER(10,2) DEFAULT (1 + 2) * 3::numeric,
           kind text DEFAULT CASE WHEN true THEN 'x' ELSE NULL END NULL,
           CONSTRAINT positive CHECK (amount > 0 AND (amount < 1e9)))
         PARTITION BY CONSISTENT HASH (id) PARTITIONS 12 TABLESPACE SET ts1",
    );
    let default = |c: &str| t.column(c).unwrap().default_expr().map(str::to_string);
    assert_eq!(default("created").as_deref(), Some("now()"));
    assert_eq!(default("status").as_deref(), Some("'A'"));
    assert_eq!(default("amount").as_deref(), Some("(1 + 2) * 3::numeric"));
    assert_eq!(
        default("kind").as_deref(),
        Some("CASE WHEN true THEN 'x' ELSE NULL END")
    );
    assert!(t.column("created").unwrap().not_null());
    let id = t.column("id").unwrap();
    assert_eq!(id.constraints[0].name.as_ref().unwrap().as_str(), "id_nn");
    assert_eq!(
        t.column("status").unwrap().constraints[1].body,
        ColumnConstraintBody::Check("status IN ('A', 'B')".into())
    );
    // The column-level PRIMARY KEY is recorded with the table's constraints.
    assert_eq!(names(&t.primary_key().unwrap().columns), ["id"]);
    let check = t.constraints.iter().find(|c| c.name.is_some()).unwrap();
    assert_eq!(check.name.as_ref().unwrap().as_str(), "positive");
    assert_eq!(
        check.body,
        ConstraintBody::Check("amount > 0 AND (amount < 1e9)".into())
    );
    let Distribution::ConsistentHash { partitions, .. } = &t.distribution else {
        panic!("{:?}", t.distribution);
    };
    assert_eq!(*partitions, PartitionCount::Fixed(12));
}

#[test]
fn family_with_parent_clause_and_foreign_key_actions() {
    let t = create(
        "CREATE SHARDED TABLE LineItems (
           CustNo NUMBER NOT NULL, LineNo INTEGER NOT NULL, OrderNo NUMBER,
           CONSTRAINT li_pk PRIMARY KEY (CustNo, OrderNo, LineNo),
           CONSTRAINT li_fk FOREIGN KEY (CustNo, OrderNo) REFERENCES Orders (CustNo, OrderNo)
             ON DELETE CASCADE ON UPDATE NO ACTION)
         PARENT Orders
         PARTITION BY CONSISTENT HASH (CustNo) PARTITIONS AUTO TABLESPACE SET ts1
         ENABLE ROW MOVEMENT",
    );
    assert_eq!(t.parent.as_ref().unwrap().name().as_str(), "orders");
    assert_eq!(t.row_movement, Some(RowMovement::Enabled));
    let target = t
        .constraints
        .iter()
        .find_map(|c| match &c.body {
            ConstraintBody::ForeignKey { target, .. } => Some(target),
            _ => None,
        })
        .unwrap();
    assert_eq!(target.on_delete, Some(ReferentialAction::Cascade));
    assert_eq!(target.on_update, Some(ReferentialAction::NoAction));
}

#[test]
fn sharded_table_without_key_clause_is_sharded_by_its_primary_key() {
    let t = create("CREATE SHARDED TABLE t (a INTEGER, b STRING, PRIMARY KEY (a, b))");
    assert_eq!(t.distribution, Distribution::PrimaryKey);
    let key: Vec<_> = t
        .sharding_key()
        .unwrap()
        .into_iter()
        .map(Ident::as_str)
        .collect();
    assert_eq!(key, ["a", "b"]);

    let err = parse("CREATE SHARDED TABLE nokey (a INTEGER)").unwrap_err();
    assert!(matches!(err, DdlError::NoShardingKey { .. }), "{err:?}");
    assert_eq!(err.sqlstate(), SqlState::INVALID_TABLE_DEFINITION);
}

#[test]
fn duplicated_table() {
    let sql = "CREATE DUPLICATED TABLE Products (SKU NUMBER PRIMARY KEY, Name VARCHAR2(128),
               Price NUMBER(19,4)) TABLESPACE products_tsp";
    assert!(is_sharding_ddl(sql));
    let t = create(sql);
    assert_eq!(t.kind, TableKind::Duplicated);
    assert_eq!(t.distribution, Distribution::None);
    assert_eq!(
        t.tablespace,
        Some(Placement::Tablespace(Ident {
            value: "products_tsp".into(),
            quoted: false,
            position: sql.find("products_tsp").unwrap(),
        }))
    );
    let err =
        parse("CREATE DUPLICATED TABLE d (a INT) PARTITION BY CONSISTENT HASH (a)").unwrap_err();
    assert!(
        matches!(err, DdlError::PartitioningOnUnsharded { .. }),
        "{err:?}"
    );
}

#[test]
fn tablespace_set_statements() {
    let sql = "create tablespace set TS1 using shards (s1, \"S2\");";
    assert!(is_sharding_ddl(sql));
    match parse(sql).unwrap() {
        Statement::CreateTablespaceSet(set) => {
            assert_eq!(set.name.as_str(), "ts1");
            assert_eq!(names(&set.shards), ["s1", "S2"]);
            assert!(set.shards[1].quoted);
        }
        other => panic!("{other:?}"),
    }
    let oracle = "CREATE TABLESPACE SET ts2 IN SHARDSPACE shsp1 USING TEMPLATE
        (DATAFILE SIZE 100m AUTOEXTEND ON NEXT 10M MAXSIZE UNLIMITED
         EXTENT MANAGEMENT LOCAL SEGMENT SPACE MANAGEMENT AUTO)";
    match parse(oracle).unwrap() {
        Statement::CreateTablespaceSet(set) => {
            assert_eq!(set.shardspace.unwrap().as_str(), "shsp1");
            assert!(set.shards.is_empty());
            assert!(set.template.unwrap().starts_with("DATAFILE SIZE 100m"));
        }
        other => panic!("{other:?}"),
    }
    match parse("DROP TABLESPACE SET ts1").unwrap() {
        Statement::DropTablespaceSet(drop) => {
            assert_eq!(drop.name.as_str(), "ts1");
            assert!(!drop.if_exists);
        }
        other => panic!("{other:?}"),
    }
    assert!(is_sharding_ddl("  /* c */ DROP TABLESPACE SET ts1"));
}

#[test]
fn tablespace_statements() {
    let sql = "create tablespace TBS1 on shard \"S1\";";
    assert!(is_sharding_ddl(sql));
    match parse(sql).unwrap() {
        Statement::CreateTablespace(t) => {
            assert_eq!(t.name.as_str(), "tbs1");
            assert_eq!(t.shard.as_str(), "S1");
        }
        other => panic!("{other:?}"),
    }
    for (sql, if_exists) in [
        ("DROP TABLESPACE tbs1", false),
        ("drop tablespace if exists tbs1;", true),
    ] {
        match parse(sql).unwrap() {
            Statement::DropTablespace(drop) => {
                assert_eq!(drop.name.as_str(), "tbs1");
                assert_eq!(drop.if_exists, if_exists, "{sql}");
            }
            other => panic!("{other:?}"),
        }
        // PostgreSQL has DROP TABLESPACE too: whose it is depends on the catalog.
        assert!(!is_sharding_ddl(sql), "{sql}");
    }
    let e = parse("CREATE TABLESPACE tbs1 ON SHARD").unwrap_err();
    assert_eq!(e.sqlstate(), SqlState::SYNTAX_ERROR);
    // PostgreSQL's own form stays PostgreSQL's.
    for theirs in [
        "CREATE TABLESPACE tbs1 LOCATION '/srv/pg'",
        "CREATE TABLESPACE tbs1 OWNER app LOCATION '/srv/pg'",
        "CREATE TABLESPACE \"on\" LOCATION '/srv/pg'",
    ] {
        assert!(!is_sharding_ddl(theirs), "{theirs}");
    }
}

#[test]
fn recognises_only_its_own_statements_from_the_first_keywords() {
    for ours in [
        "CREATE SHARDED TABLE t (a int)",
        "-- comment\ncreate duplicated table t (a int)",
        "ALTER TABLE s.\"T\" DISABLE ROW MOVEMENT",
    ] {
        assert!(is_sharding_ddl(ours), "{ours}");
    }
    for theirs in [
        "CREATE TABLE t (a int)",
        "CREATE TABLESPACE ts LOCATION '/x'",
        "DROP TABLE t",
        "ALTER TABLE t ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE t ADD COLUMN b int",
        "SELECT 1",
        "",
        "'unterminated",
    ] {
        assert!(!is_sharding_ddl(theirs), "{theirs}");
    }
}

#[test]
fn quoted_identifiers_keep_case_and_unquoted_fold() {
    let t = create(
        "CREATE SHARDED TABLE \"Accounts\" (\"Id\" NUMBER, Name VARCHAR2(10), \"select\" INT,
         PRIMARY KEY (\"Id\")) PARTITION BY CONSISTENT HASH (\"Id\")",
    );
    assert_eq!(t.name.name().as_str(), "Accounts");
    assert!(t.name.name().quoted);
    assert_eq!(
        names(&[t.columns[0].name.clone(), t.columns[1].name.clone()]),
        ["Id", "name"]
    );
    assert_eq!(t.columns[2].name.as_str(), "select");
    // "Id" and id are different columns, as in PostgreSQL.
    let err =
        parse("CREATE SHARDED TABLE a (\"Id\" INT) PARTITION BY CONSISTENT HASH (id)").unwrap_err();
    assert_eq!(
        err.to_string(),
        "column \"id\" named in partition key does not exist"
    );
    assert_eq!(err.sqlstate(), SqlState::UNDEFINED_COLUMN);
}

#[test]
fn comments_anywhere() {
    let t = create(
        "/* lead */ CREATE -- kw\n SHARDED /* a /* nested */ one */ TABLE t ( a INT -- col\n,
         b INT, PRIMARY KEY (a)) // nosql style\n PARTITION BY CONSISTENT HASH (a) -- end",
    );
    assert_eq!(
        names(&[t.columns[0].name.clone(), t.columns[1].name.clone()]),
        ["a", "b"]
    );
    assert!(t.non_postgres_syntax, "`//` comments are not PostgreSQL");
}

#[test]
fn syntax_errors_point_at_the_token_like_postgres() {
    let sql = "CREATE SHARDED TABLE t (a INT) PARTITION BY CONSISTENT HASH a";
    let err = parse(sql).unwrap_err();
    assert_eq!(err.to_string(), "syntax error at or near \"a\"");
    assert_eq!(err.position(), Some(sql.len() - 1));
    assert_eq!(err.error_position(sql), Some(sql.len() as u32));
    assert_eq!(err.sqlstate(), SqlState::SYNTAX_ERROR);

    let err = parse("CREATE SHARDED TABLE t (a INT,").unwrap_err();
    assert_eq!(err.to_string(), "syntax error at end of input");

    let sql = "CREATE SHARDED TABLE tävle (a INT) PARTITIONS AUTO";
    let err = parse(sql).unwrap_err();
    assert_eq!(err.to_string(), "syntax error at or near \"PARTITIONS\"");
    // PostgreSQL counts characters, not bytes, from 1.
    assert_eq!(err.error_position(sql), Some(36));

    let err = parse("CREATE SHARDED TABLE t (a INT) ENABLE ROW MOVEMENT DISABLE ROW MOVEMENT")
        .unwrap_err();
    assert_eq!(err.to_string(), "syntax error at or near \"DISABLE\"");

    let err = parse("CREATE SHARDED TABLE t (a INT PRIMARY KEY); DROP TABLESPACE SET x; junk")
        .unwrap_err();
    assert_eq!(err.to_string(), "syntax error at or near \"junk\"");
    let err =
        parse("CREATE SHARDED TABLE t (a INT PRIMARY KEY); DROP TABLESPACE SET x").unwrap_err();
    assert_eq!(err.to_string(), "syntax error at or near \"DROP\"");
}

#[test]
fn partition_bounds_need_one_value_per_column_and_a_tablespace() {
    let err = parse(
        "CREATE SHARDED TABLE r (a INT, b INT) PARTITION BY RANGE (a, b)
         (PARTITION p1 VALUES LESS THAN (10) TABLESPACE t1)",
    )
    .unwrap_err();
    assert_eq!(
        err,
        DdlError::BoundArity {
            partition: "p1".into(),
            expected: 2,
            found: 1,
            position: err.position().unwrap(),
        }
    );
    let err =
        parse("CREATE SHARDED TABLE l (a TEXT) PARTITION BY LIST (a) (PARTITION p1 VALUES ('x'))")
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "partition \"p1\" needs a TABLESPACE clause: it decides where the partition lives"
    );
}

#[test]
fn range_bounds_accept_maxvalue_signed_and_typed_literals() {
    let t = create(
        "CREATE SHARDED TABLE r (d DATE, n NUMBER) PARTITION BY RANGE (d, n)
         (PARTITION p1 VALUES LESS THAN (DATE '2024-01-01', -5) TABLESPACE t1,
          PARTITION p2 VALUES LESS THAN (MAXVALUE, MAXVALUE) TABLESPACE t2)",
    );
    let Distribution::Range { partitions, .. } = &t.distribution else {
        panic!("{:?}", t.distribution);
    };
    assert_eq!(
        partitions[0].bound,
        PartitionBound::LessThan(vec![
            Value::Typed {
                type_name: "date".into(),
                value: "2024-01-01".into()
            },
            Value::Number("-5".into()),
        ])
    );
    assert_eq!(
        partitions[1].bound,
        PartitionBound::LessThan(vec![Value::MaxValue, Value::MaxValue])
    );
}

#[test]
fn composite_list_with_one_column() {
    let t = create(
        "CREATE SHARDED TABLE c (id INT, geo VARCHAR2(10), PRIMARY KEY (id, geo))
         PARTITIONSET BY LIST (geo) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO
         (PARTITIONSET america VALUES ('AMERICA', 'CANADA') TABLESPACE SET ts1,
          PARTITIONSET rest VALUES (DEFAULT) TABLESPACE SET ts2)",
    );
    let Distribution::Composite { partition_sets, .. } = &t.distribution else {
        panic!("{:?}", t.distribution);
    };
    assert_eq!(
        partition_sets[0].bound,
        PartitionBound::In(vec![
            vec![Value::String("AMERICA".into())],
            vec![Value::String("CANADA".into())]
        ])
    );
    assert_eq!(
        partition_sets[1].bound,
        PartitionBound::In(vec![vec![Value::Default]])
    );
    let err = parse(
        "CREATE SHARDED TABLE c (id INT, geo TEXT) PARTITIONSET BY LIST (geo)
         PARTITION BY CONSISTENT HASH (id) (PARTITIONSET a VALUES ('x') TABLESPACE ts1)",
    )
    .unwrap_err();
    assert!(err.to_string().contains("TABLESPACE SET clause"), "{err}");
}

#[test]
fn reference_must_name_a_foreign_key_of_the_table() {
    let err = parse(
        "CREATE SHARDED TABLE o (a INT, CONSTRAINT pk PRIMARY KEY (a)) PARTITION BY REFERENCE (pk)",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "PARTITION BY REFERENCE (\"pk\") must name a FOREIGN KEY constraint of this table"
    );
    let err = parse("CREATE SHARDED TABLE o (a INT, PRIMARY KEY (b))").unwrap_err();
    assert_eq!(err.to_string(), "column \"b\" named in key does not exist");
}
