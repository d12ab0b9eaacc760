//! Routing by the router alone, against catalog snapshots made here: list, range and
//! composite pruning, `= ANY(array)` in every form, and constants read as PostgreSQL reads
//! them. Which shard really holds a row is checked against real shards in
//! tests/routing_placement.rs.

use std::sync::Arc;

use super::array;
use super::*;
use crate::catalog::{Partition, PartitionSet, Shard, Table};
use crate::model::{
    BoundValue as B, KeyColumn, PartitionBound, RowMovement, ShardingMethod, TableId, TableKind,
    TableState, TablespaceSetId,
};
use crate::router::plan::{self, ColumnSource, Plan, Planned};

struct NoColumns;

impl ColumnSource for NoColumns {
    fn columns(&self, _: TableId) -> Option<Arc<Vec<String>>> {
        None
    }

    fn column_defs(&self, _: TableId) -> Option<Arc<Vec<crate::router::plan::ColumnDef>>> {
        None
    }
}

fn lit(s: &str) -> B {
    B::Literal(s.into())
}

fn table(id: i64, name: &str, method: ShardingMethod, key: &[(&str, &str)]) -> Table {
    Table {
        id: TableId(id),
        schema: "public".into(),
        name: name.into(),
        kind: TableKind::Sharded,
        method: Some(method),
        key_columns: key.iter().map(|(n, t)| KeyColumn::new(*n, *t)).collect(),
        partition_set_columns: Vec::new(),
        primary_key: Vec::new(),
        root: TableId(id),
        parent: None,
        row_movement: RowMovement::Disabled,
        state: TableState::Active,
        tablespace_set: None,
        chunks: Default::default(),
        partition_sets: Vec::new(),
        partitions: Vec::new(),
        generated: Vec::new(),
        nosql: false,
        ttl: None,
    }
}

fn partitions(bounds: Vec<PartitionBound>) -> Vec<Partition> {
    bounds
        .into_iter()
        .enumerate()
        .map(|(i, bound)| Partition {
            name: format!("p{i}"),
            bound,
            tablespace: format!("tbs{i}"),
            shard: ShardId(i as u32),
        })
        .collect()
}

fn snapshot() -> Snapshot {
    let mut tables = Vec::new();
    // LIST (text): p0 OR/WA on s0, p1 AZ on s1, p2 NULL on s2, p3 DEFAULT on s3.
    let mut t = table(1, "lst", ShardingMethod::List, &[("state", "text")]);
    t.partitions = partitions(vec![
        PartitionBound::In(vec![vec![lit("OR")], vec![lit("WA")]]),
        PartitionBound::In(vec![vec![lit("AZ")]]),
        PartitionBound::In(vec![vec![B::Null]]),
        PartitionBound::In(vec![vec![B::Default]]),
    ]);
    tables.push(t);
    // LIST (int): p0 1,2; p1 7,8; p2 DEFAULT.
    let mut t = table(2, "ilst", ShardingMethod::List, &[("k", "integer")]);
    t.partitions = partitions(vec![
        PartitionBound::In(vec![vec![lit("1")], vec![lit("2")]]),
        PartitionBound::In(vec![vec![lit("7")], vec![lit("8")]]),
        PartitionBound::In(vec![vec![B::Default]]),
    ]);
    tables.push(t);
    // RANGE (bigint): < 10, < 20, < 30, < MAXVALUE.
    let mut t = table(3, "rng", ShardingMethod::Range, &[("k", "bigint")]);
    t.partitions = partitions(
        ["10", "20", "30"]
            .into_iter()
            .map(|v| PartitionBound::LessThan(vec![lit(v)]))
            .chain([PartitionBound::LessThan(vec![B::MaxValue])])
            .collect(),
    );
    tables.push(t);
    // RANGE (a int, b int): < (10,100), < (20,200), < (MAXVALUE, MAXVALUE).
    let mut t = table(
        4,
        "rng2",
        ShardingMethod::Range,
        &[("a", "integer"), ("b", "integer")],
    );
    t.partitions = partitions(vec![
        PartitionBound::LessThan(vec![lit("10"), lit("100")]),
        PartitionBound::LessThan(vec![lit("20"), lit("200")]),
        PartitionBound::LessThan(vec![B::MaxValue, B::MaxValue]),
    ]);
    tables.push(t);
    // RANGE (date): < 2024-01-01, < 2024-07-01, < MAXVALUE.
    let mut t = table(5, "drng", ShardingMethod::Range, &[("d", "date")]);
    t.partitions = partitions(vec![
        PartitionBound::LessThan(vec![lit("2024-01-01")]),
        PartitionBound::LessThan(vec![lit("2024-07-01")]),
        PartitionBound::LessThan(vec![B::MaxValue]),
    ]);
    tables.push(t);
    // Composite LIST: class silver (SLV, BRZ) over s0, s1; gold (GLD) over s2, s3.
    let mut t = table(
        6,
        "clst",
        ShardingMethod::CompositeList,
        &[("id", "bigint")],
    );
    t.partition_set_columns = vec![KeyColumn::new("class", "text")];
    t.partition_sets = vec![
        PartitionSet {
            name: "silver".into(),
            bound: PartitionBound::In(vec![vec![lit("SLV")], vec![lit("BRZ")]]),
            tablespace_set: TablespaceSetId(1),
            chunks: vec![ShardId(0), ShardId(1), ShardId(0), ShardId(1)].into(),
        },
        PartitionSet {
            name: "gold".into(),
            bound: PartitionBound::In(vec![vec![lit("GLD")]]),
            tablespace_set: TablespaceSetId(2),
            chunks: vec![ShardId(2), ShardId(3), ShardId(2), ShardId(3)].into(),
        },
    ];
    tables.push(t);
    // Composite RANGE on (grade int): < 10 over s0, s1; < 20 over s2, s3.
    let mut t = table(
        7,
        "crng",
        ShardingMethod::CompositeRange,
        &[("id", "bigint")],
    );
    t.partition_set_columns = vec![KeyColumn::new("grade", "integer")];
    t.partition_sets = vec![
        PartitionSet {
            name: "low".into(),
            bound: PartitionBound::LessThan(vec![lit("10")]),
            tablespace_set: TablespaceSetId(1),
            chunks: vec![ShardId(0), ShardId(1)].into(),
        },
        PartitionSet {
            name: "high".into(),
            bound: PartitionBound::LessThan(vec![lit("20")]),
            tablespace_set: TablespaceSetId(2),
            chunks: vec![ShardId(2), ShardId(3)].into(),
        },
    ];
    tables.push(t);
    // Consistent hash over four shards, two chunks each; keys of several types.
    for (id, name, ty) in [
        (8, "h_int8", "bigint"),
        (9, "h_num", "numeric"),
        (10, "h_date", "date"),
        (11, "h_ts", "timestamp without time zone"),
        (12, "h_tstz", "timestamp with time zone"),
        (13, "h_bool", "boolean"),
        (14, "h_char", "character(5)"),
        (15, "h_uuid", "uuid"),
        (16, "h_text", "text"),
    ] {
        let mut t = table(id, name, ShardingMethod::ConsistentHash, &[("k", ty)]);
        t.chunks = (0..8).map(|i| ShardId(i % 4)).collect::<Vec<_>>().into();
        tables.push(t);
    }
    // A text RANGE: its order is the collation's, so nothing is pruned.
    let mut t = table(17, "trng", ShardingMethod::Range, &[("s", "text")]);
    t.partitions = partitions(vec![
        PartitionBound::LessThan(vec![lit("m")]),
        PartitionBound::LessThan(vec![B::MaxValue]),
    ]);
    tables.push(t);
    // RANGE (numeric, numeric), as seeds/004's user-defined example: < (10, 100) on s0,
    // < (20, 200) on s1.
    let mut t = table(
        18,
        "nrng",
        ShardingMethod::Range,
        &[("state", "numeric"), ("state2", "numeric")],
    );
    t.partitions = partitions(vec![
        PartitionBound::LessThan(vec![lit("10"), lit("100")]),
        PartitionBound::LessThan(vec![lit("20"), lit("200")]),
    ]);
    tables.push(t);
    let shards = (0..4)
        .map(|i| Shard {
            id: ShardId(i),
            name: format!("s{}", i + 1),
        })
        .collect();
    Snapshot::new(1, shards, Vec::new(), Vec::new(), tables)
}

fn sharded(snap: &Snapshot, sql: &str) -> Arc<plan::ShardedPlan> {
    match plan::plan(sql, snap, &NoColumns) {
        Planned::Plan(Plan::Sharded(p)) => p,
        Planned::Plan(other) => panic!("{sql}: {other:?}"),
        Planned::NeedColumns(_) => panic!("{sql}: needs columns"),
    }
}

/// A Bind's parameter part: one format code per value, then the values.
fn bind(params: &[(i16, Option<Vec<u8>>)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend((params.len() as i16).to_be_bytes());
    for (f, _) in params {
        b.extend(f.to_be_bytes());
    }
    b.extend((params.len() as i16).to_be_bytes());
    for (_, v) in params {
        match v {
            None => b.extend((-1i32).to_be_bytes()),
            Some(v) => {
                b.extend((v.len() as i32).to_be_bytes());
                b.extend(v);
            }
        }
    }
    b.extend(0i16.to_be_bytes());
    b
}

fn declared(oids: &[u32]) -> Vec<u8> {
    let mut b = (oids.len() as i16).to_be_bytes().to_vec();
    for o in oids {
        b.extend(o.to_be_bytes());
    }
    b
}

fn route_with(sql: &str, params: &[(i16, Option<Vec<u8>>)], oids: &[u32]) -> Vec<u32> {
    let snap = snapshot();
    let p = sharded(&snap, sql);
    let rest = bind(params);
    let types = declared(oids);
    let params = Params::parse(&rest, &types).expect("params");
    match route(&snap, &p, &params)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .route
    {
        Route::Single(s) => vec![s.0],
        Route::Multi(v) => v.into_iter().map(|s| s.0).collect(),
        Route::All => (0..4).collect(),
    }
}

fn shards_of(sql: &str) -> Vec<u32> {
    route_with(sql, &[], &[])
}

fn text(s: &str) -> (i16, Option<Vec<u8>>) {
    (0, Some(s.as_bytes().to_vec()))
}

/// `array_send` of a one-dimensional int8 array (`None`: a NULL element).
fn int8_array(values: &[Option<i64>]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(1i32.to_be_bytes());
    b.extend(i32::from(values.contains(&None)).to_be_bytes());
    b.extend(20u32.to_be_bytes());
    b.extend((values.len() as i32).to_be_bytes());
    b.extend(1i32.to_be_bytes());
    for v in values {
        match v {
            None => b.extend((-1i32).to_be_bytes()),
            Some(v) => {
                b.extend(8i32.to_be_bytes());
                b.extend(v.to_be_bytes());
            }
        }
    }
    b
}

#[test]
fn list_partitions_are_pruned_by_equalities() {
    assert_eq!(shards_of("SELECT * FROM lst WHERE state = 'OR'"), [0]);
    assert_eq!(
        shards_of("SELECT * FROM lst WHERE state IN ('WA', 'AZ')"),
        [0, 1]
    );
    assert_eq!(
        shards_of("SELECT * FROM lst WHERE state = 'TX'"),
        [3],
        "DEFAULT"
    );
    assert_eq!(shards_of("SELECT * FROM lst WHERE state IS NULL"), [2]);
    assert_eq!(
        shards_of("SELECT * FROM lst WHERE state = ANY('{OR,AZ}')"),
        [0, 1]
    );
    assert_eq!(
        shards_of("SELECT * FROM lst WHERE state = ANY('{OR,TX}'::text[])"),
        [0, 3]
    );
    assert_eq!(
        shards_of("SELECT * FROM lst WHERE state = ANY(ARRAY['AZ', 'WA'])"),
        [0, 1]
    );
    // Text order is the collation's: a range on a text list key prunes nothing.
    // …but NULL satisfies no comparison.
    assert_eq!(shards_of("SELECT * FROM lst WHERE state > 'B'"), [0, 1, 3]);
    assert_eq!(shards_of("SELECT * FROM lst"), [0, 1, 2, 3]);
    // An integer list partition is judged by its values; DEFAULT may hold anything.
    assert_eq!(shards_of("SELECT * FROM ilst WHERE k < 5"), [0, 2]);
    assert_eq!(shards_of("SELECT * FROM ilst WHERE k BETWEEN 3 AND 6"), [2]);
    assert_eq!(shards_of("SELECT * FROM ilst WHERE k IN (1, 8)"), [0, 1]);
    assert_eq!(
        shards_of("SELECT * FROM ilst WHERE k IN (1, 8, 9)"),
        [0, 1, 2]
    );
}

#[test]
fn range_partitions_are_pruned_as_postgres_compares_bounds() {
    let q = |w: &str| shards_of(&format!("SELECT * FROM rng WHERE {w}"));
    assert_eq!(q("k < 10"), [0]);
    assert_eq!(q("k <= 10"), [0, 1]);
    assert_eq!(q("k > 25"), [2, 3]);
    assert_eq!(q("k >= 30"), [3]);
    // Integers are discrete: above 29 is 30 or more.
    assert_eq!(q("k > 29"), [3]);
    assert_eq!(
        q("k > 9 AND k < 10"),
        [0],
        "no integer: any one shard answers"
    );
    assert_eq!(q("k > 9 AND k <= 10"), [1]);
    assert_eq!(q("k BETWEEN 10 AND 19"), [1]);
    assert_eq!(q("15 > k"), [0, 1]);
    assert_eq!(q("k > 5 AND k < 12"), [0, 1]);
    assert_eq!(q("k > 12 AND k < 5"), [0], "no row: any one shard answers");
    assert_eq!(q("k = 5"), [0]);
    assert_eq!(q("k = -5"), [0]);
    assert_eq!(q("k < -5"), [0]);
    assert_eq!(q("k = '25'"), [2]);
    assert_eq!(q("k < '10'::bigint"), [0]);
    assert_eq!(q("k < 10::int2"), [0]);
    assert_eq!(q("k IS NULL"), [0], "a range partition takes no NULL");
    // Values the router cannot compare as the column does narrow nothing.
    assert_eq!(q("k < 10.5"), [0, 1, 2, 3]);
    assert_eq!(q("k < '10'::numeric"), [0, 1, 2, 3]);
    assert_eq!(q("k < k + 1"), [0, 1, 2, 3]);
    assert_eq!(q("k > 25 OR k < 5"), [0, 1, 2, 3]);
    assert_eq!(q("k NOT BETWEEN 0 AND 50"), [0, 1, 2, 3]);
    // Parameters: text, binary int8, and a declared type of another kind.
    let sql = "SELECT * FROM rng WHERE k < $1";
    assert_eq!(route_with(sql, &[text("10")], &[]), [0]);
    assert_eq!(
        route_with(sql, &[(1, Some(10i64.to_be_bytes().to_vec()))], &[20]),
        [0]
    );
    assert_eq!(
        route_with(sql, &[(1, Some(10i32.to_be_bytes().to_vec()))], &[23]),
        [0]
    );
    assert_eq!(route_with(sql, &[text("10")], &[1700]), [0, 1, 2, 3]);
    assert_eq!(
        route_with(
            "SELECT * FROM rng WHERE k BETWEEN $1 AND $2",
            &[text("20"), text("35")],
            &[]
        ),
        [2, 3]
    );
}

#[test]
fn multi_column_range_bounds_compare_lexicographically() {
    let q = |w: &str| shards_of(&format!("SELECT * FROM rng2 WHERE {w}"));
    // (10, 50) sorts before (10, 100): the first partition's.
    assert_eq!(q("a = 10 AND b < 100"), [0]);
    assert_eq!(q("a = 10 AND b >= 100"), [1]);
    assert_eq!(q("a = 10"), [0, 1]);
    assert_eq!(q("a < 10"), [0]);
    assert_eq!(q("a > 20"), [2]);
    assert_eq!(q("a = 20"), [1, 2]);
    assert_eq!(q("a = 20 AND b = 199"), [1]);
    assert_eq!(q("a = 20 AND b = 200"), [2]);
    assert_eq!(q("a BETWEEN 11 AND 19"), [1]);
    assert_eq!(q("b = 5"), [0, 1, 2]);
    assert_eq!(q("a IS NULL"), [0]);
}

#[test]
fn date_ranges_compare_dates_and_refuse_other_types() {
    let q = |w: &str| shards_of(&format!("SELECT * FROM drng WHERE {w}"));
    assert_eq!(q("d < '2024-01-01'"), [0]);
    assert_eq!(q("d >= DATE '2024-07-01'"), [2]);
    assert_eq!(q("d BETWEEN '2023-12-31' AND '2024-01-01'"), [0, 1]);
    assert_eq!(q("d = '2024-03-05'::date"), [1]);
    // date < timestamp '2024-01-01 10:00' holds for 2024-01-01: not compared as a date.
    assert_eq!(q("d < '2024-01-01 10:00'::timestamp"), [0, 1, 2]);
    // An undecorated literal becomes a date, as in PostgreSQL: after 2024-06-30 is July on.
    assert_eq!(q("d > '2024-06-30 23:00'"), [2]);
}

#[test]
fn text_ranges_are_not_pruned() {
    assert_eq!(shards_of("SELECT * FROM trng WHERE s < 'c'"), [0, 1]);
    assert_eq!(shards_of("SELECT * FROM trng WHERE s = 'c'"), [0, 1]);
}

#[test]
fn composite_tables_prune_partition_sets_then_chunks() {
    let snap = snapshot();
    let clst = snap.table_by_name("public", "clst").unwrap();
    let q = |w: &str| shards_of(&format!("SELECT * FROM clst WHERE {w}"));
    assert_eq!(q("class = 'GLD'"), [2, 3]);
    assert_eq!(q("class IN ('SLV', 'BRZ')"), [0, 1]);
    assert_eq!(q("class IN ('SLV', 'GLD')"), [0, 1, 2, 3]);
    assert_eq!(q("class = 'XXX'"), [0], "no partition set takes it");
    let gold5 = place::shard_for(
        &snap,
        clst,
        &[KeyValue::Text("5")],
        &[KeyValue::Text("GLD")],
    )
    .unwrap();
    assert_eq!(q("class = 'GLD' AND id = 5"), [gold5.0]);
    // The hash key alone: its chunk in each partition set.
    let silver5 = place::shard_for(
        &snap,
        clst,
        &[KeyValue::Text("5")],
        &[KeyValue::Text("SLV")],
    )
    .unwrap();
    let mut both = vec![silver5.0, gold5.0];
    both.sort();
    assert_eq!(q("id = 5"), both);
    let q = |w: &str| shards_of(&format!("SELECT * FROM crng WHERE {w}"));
    assert_eq!(q("grade < 10"), [0, 1]);
    assert_eq!(q("grade >= 10"), [2, 3]);
    assert_eq!(q("grade BETWEEN 5 AND 12"), [0, 1, 2, 3]);
    assert_eq!(q("grade = 15 AND id = ANY('{1,2,3,4,5,6,7,8}')"), [2, 3]);
}

#[test]
fn any_of_an_array_routes_to_its_elements_shards() {
    let snap = snapshot();
    let t = snap.table_by_name("public", "h_int8").unwrap();
    let shard = |v: &str| {
        place::shard_for(&snap, t, &[KeyValue::Text(v)], &[])
            .unwrap()
            .0
    };
    let union = |vs: &[&str]| {
        let mut s: Vec<u32> = vs.iter().map(|v| shard(v)).collect();
        s.sort();
        s.dedup();
        s
    };
    let three = union(&["1", "2", "3"]);
    assert!(
        three.len() < 4,
        "pick values that do not cover every shard: {three:?}"
    );
    for sql in [
        "SELECT * FROM h_int8 WHERE k = ANY('{1,2,3}')",
        "SELECT * FROM h_int8 WHERE k = ANY('{1, \"2\" , 3}'::bigint[])",
        "SELECT * FROM h_int8 WHERE k = ANY('[0:2]={1,2,3}')",
        "SELECT * FROM h_int8 WHERE k = ANY('{{1,2},{3,NULL}}')",
        "SELECT * FROM h_int8 WHERE k = ANY(ARRAY[1, 2, 3])",
        "SELECT * FROM h_int8 WHERE k IN (1, 2, 3)",
    ] {
        assert_eq!(shards_of(sql), three, "{sql}");
    }
    let sql = "SELECT * FROM h_int8 WHERE k = ANY($1)";
    assert_eq!(route_with(sql, &[text("{1,2,3}")], &[]), three);
    assert_eq!(route_with(sql, &[text("{1,2,3}")], &[1016]), three);
    let binary = int8_array(&[Some(1), Some(2), Some(3), None]);
    assert_eq!(
        route_with(sql, &[(1, Some(binary.clone()))], &[1016]),
        three
    );
    assert_eq!(
        route_with(
            "SELECT * FROM h_int8 WHERE k = ANY($1::bigint[])",
            &[(1, Some(binary))],
            &[]
        ),
        three
    );
    // An int4 array for an int8 key: the values are the same numbers.
    let mut int4 = Vec::new();
    int4.extend(1i32.to_be_bytes());
    int4.extend(0i32.to_be_bytes());
    int4.extend(23u32.to_be_bytes());
    int4.extend(3i32.to_be_bytes());
    int4.extend(1i32.to_be_bytes());
    for v in [1i32, 2, 3] {
        int4.extend(4i32.to_be_bytes());
        int4.extend(v.to_be_bytes());
    }
    assert_eq!(route_with(sql, &[(1, Some(int4))], &[1007]), three);
    // A single element: one shard.
    assert_eq!(route_with(sql, &[text("{2}")], &[]), [shard("2")]);
    // Unreadable arrays narrow nothing; PostgreSQL reports the error itself.
    assert_eq!(route_with(sql, &[text("{1,2")], &[]), [0, 1, 2, 3]);
    assert_eq!(route_with(sql, &[text("{1.5}")], &[]), [0, 1, 2, 3]);
    // No element, or a NULL array: no row matches; one shard answers.
    assert_eq!(route_with(sql, &[text("{}")], &[]).len(), 1);
    assert_eq!(route_with(sql, &[(0, None)], &[]).len(), 1);
}

#[test]
fn array_text_format_follows_array_in() {
    let some = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    assert_eq!(array::parse_text("{1,2,3}"), Some(some(&["1", "2", "3"])));
    assert_eq!(array::parse_text(" { 1 , 2 } "), Some(some(&["1", "2"])));
    assert_eq!(array::parse_text("{}"), Some(Vec::new()));
    assert_eq!(
        array::parse_text(r#"{"a,b","c\"d",NULL,"NULL", x y ,\NULL}"#),
        Some(vec![
            Some("a,b".into()),
            Some("c\"d".into()),
            None,
            Some("NULL".into()),
            Some("x y".into()),
            Some("NULL".into()),
        ])
    );
    assert_eq!(
        array::parse_text("{{1,2},{3,4}}"),
        Some(some(&["1", "2", "3", "4"]))
    );
    assert_eq!(array::parse_text("[1:2]={7,8}"), Some(some(&["7", "8"])));
    for bad in ["{1,2", "1,2", "{1,2}x", "{\"a}", "{a\"b}", "{1 2 {3}}"] {
        assert_eq!(array::parse_text(bad), None, "{bad}");
    }
}

#[test]
fn constants_are_read_as_the_key_columns_type() {
    let snap = snapshot();
    let shard = |table: &str, v: &str| {
        let t = snap.table_by_name("public", table).unwrap();
        place::shard_for(&snap, t, &[KeyValue::Text(v)], &[])
            .unwrap()
            .0
    };
    let cases: &[(&str, &str, &str)] = &[
        ("h_int8", "'42'", "42"),
        ("h_int8", "42", "42"),
        ("h_int8", "-5", "-5"),
        ("h_int8", "'-5'::bigint", "-5"),
        ("h_num", "42", "42"),
        ("h_num", "42.0", "42"),
        ("h_num", "4.2e1", "42"),
        ("h_num", "'42.000'", "42"),
        ("h_num", "-5", "-5"),
        ("h_date", "'2024-01-01'", "2024-01-01"),
        ("h_date", "DATE '2024-01-01'", "2024-01-01"),
        ("h_ts", "'2024-01-01 10:00'", "2024-01-01 10:00:00"),
        (
            "h_ts",
            "TIMESTAMP '2024-01-01T10:00:00.000'",
            "2024-01-01 10:00:00",
        ),
        ("h_tstz", "'2024-01-01 10:00+02'", "2024-01-01 08:00:00+00"),
        ("h_bool", "true", "t"),
        ("h_bool", "'yes'", "t"),
        ("h_bool", "FALSE", "f"),
        ("h_char", "'ab'", "ab   "),
        ("h_char", "'ab   '", "ab"),
        (
            "h_uuid",
            "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
        ),
        ("h_text", "'it''s'", "it's"),
    ];
    for (table, literal, canonical) in cases {
        let sql = format!("SELECT * FROM {table} WHERE k = {literal}");
        assert_eq!(shards_of(&sql), [shard(table, canonical)], "{sql}");
    }
    // 42.5 is no int8: PostgreSQL compares every row, so every shard is asked.
    assert_eq!(
        shards_of("SELECT * FROM h_int8 WHERE k = 42.5"),
        [0, 1, 2, 3]
    );
    // A timestamptz without an offset depends on the session's TimeZone: every shard.
    assert_eq!(
        shards_of("SELECT * FROM h_tstz WHERE k = '2024-01-01 10:00'"),
        [0, 1, 2, 3]
    );
}

#[test]
fn an_insert_of_a_timestamptz_without_offset_is_refused() {
    let snap = snapshot();
    let p = sharded(&snap, "INSERT INTO h_tstz (k) VALUES ('2024-01-01 10:00')");
    let err = route(&snap, &p, &Params::default()).expect_err("no offset");
    assert!(err.to_string().contains("add an offset"), "{err}");
    assert_eq!(
        crate::client_error::ClientError::sqlstate(&err),
        tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED
    );
    let p = sharded(&snap, "INSERT INTO h_tstz (k) VALUES ('2024-01-01 10:00Z')");
    assert!(route(&snap, &p, &Params::default()).is_ok());
}

#[test]
fn numeric_values_order_as_postgres_sorts_them() {
    use crate::router::hash::{self, KeyType};
    let key = |s: &str| {
        hash::comparable(KeyType::Numeric(None), &KeyValue::Text(s))
            .unwrap()
            .unwrap()
    };
    let sorted = [
        "-Infinity",
        "-1e3",
        "-10",
        "-1.5",
        "-0.001",
        "0",
        "0.001",
        "0.5",
        "1",
        "1.5",
        "9.99",
        "10",
        "100",
        "1e3",
        "Infinity",
        "NaN",
    ];
    for (i, a) in sorted.iter().enumerate() {
        for (j, b) in sorted.iter().enumerate() {
            assert_eq!(key(a).order(&key(b)), Some(i.cmp(&j)), "{a} vs {b}");
        }
    }
    for (a, b) in [
        ("-0", "0"),
        ("1.50", "15e-1"),
        ("-2.0", "-2"),
        ("NaN", "nan"),
    ] {
        assert_eq!(key(a), key(b), "{a} = {b}");
    }
    // numeric_send of -1.5: one group ... two groups (1, 5000), weight 0, sign 0x4000, dscale 1.
    let binary = [0, 2, 0, 0, 0x40, 0, 0, 1, 0, 1, 0x13, 0x88];
    assert_eq!(
        hash::comparable(KeyType::Numeric(None), &KeyValue::Binary(&binary))
            .unwrap()
            .unwrap(),
        key("-1.5")
    );
}

#[test]
fn numeric_ranges_are_placed_and_pruned() {
    let q = |w: &str| shards_of(&format!("SELECT * FROM nrng WHERE {w}"));
    assert_eq!(q("state = 10 AND state2 = 50"), [0]);
    assert_eq!(q("state = 10.0 AND state2 >= 100"), [1]);
    assert_eq!(q("state = 15 AND state2 = 5"), [1]);
    assert_eq!(q("state < -1"), [0]);
    assert_eq!(q("state < 9.99"), [0]);
    assert_eq!(q("state > 19.5"), [1]);
    assert_eq!(q("state >= 10"), [0, 1]);
    // numeric is not discrete: 9.5 lies between 9 and 10.
    assert_eq!(q("state > 9 AND state < 10"), [0]);
    let snap = snapshot();
    let shard_of_row = |values: &str| {
        let p = sharded(
            &snap,
            &format!("INSERT INTO nrng (state, state2) VALUES {values}"),
        );
        route(&snap, &p, &Params::default()).map(|r| r.rows)
    };
    assert_eq!(shard_of_row("(-3.5, 1e3)"), Ok(vec![ShardId(0)]));
    assert_eq!(shard_of_row("(10, 99.99)"), Ok(vec![ShardId(0)]));
    assert_eq!(shard_of_row("(10, 100)"), Ok(vec![ShardId(1)]));
    let err = shard_of_row("(20, 200)").expect_err("above the last bound");
    assert_eq!(
        crate::client_error::ClientError::sqlstate(&err),
        tokio_postgres::error::SqlState::CHECK_VIOLATION
    );
}
