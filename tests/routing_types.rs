//! User-defined types through the proxy: a type made on every shard has another OID on each,
//! and clients cache OIDs, so every OID a client sees is the first shard's and every OID it
//! sends becomes the shard's own. Checked with tokio-postgres, which looks a type up (on the
//! first shard, through the proxy) by the OID a description names, against tables whose shards
//! do not include the first.
mod common;
mod routing_common;

use bytes::BytesMut;
use common::shards;
use routing_common::*;
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, Kind, ToSql, Type};

/// An enum value, by its label.
#[derive(Debug, Clone, PartialEq)]
struct Label(String);

impl<'a> FromSql<'a> for Label {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Label(std::str::from_utf8(raw)?.to_string()))
    }

    fn accepts(ty: &Type) -> bool {
        matches!(ty.kind(), Kind::Enum(_))
    }
}

impl ToSql for Label {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(ty.kind(), Kind::Enum(_))
    }

    to_sql_checked!();
}

const LABELS: [&str; 3] = ["sad", "ok", "happy"];

fn label(id: i64) -> Label {
    Label(LABELS[id as usize % 3].to_string())
}

/// The OID `type_name` has on each shard.
async fn oids_on_shards(type_name: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let oid: u32 = c
            .query_one("SELECT $1::text::regtype::oid", &[&type_name])
            .await
            .unwrap_or_else(|e| panic!("{type_name} on shard {i}: {e}"))
            .get(0);
        out.push(oid);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_see_the_first_shards_type_oids_from_every_shard() {
    let proxy = start();
    let c = proxy.connect().await;
    tablespaces(&c, "rty").await;
    exec(&c, "CREATE TYPE rty_mood AS ENUM ('sad', 'ok', 'happy')").await;
    let mood = oids_on_shards("rty_mood").await;
    let moods = oids_on_shards("rty_mood[]").await;
    // Otherwise the test proves nothing.
    assert!(
        mood[2] != mood[0] && mood[3] != mood[0],
        "the enum has the same OID on the shards: {mood:?}"
    );
    // On the third and fourth shard only: they describe its statements.
    exec(
        &c,
        "CREATE SHARDED TABLE rty_t (id bigint PRIMARY KEY, m rty_mood, ms rty_mood[]) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO TABLESPACE SET rty_tsb",
    )
    .await;
    let rows: Vec<String> = (1..=40)
        .map(|i| {
            let l = &label(i).0;
            format!("({i}, '{l}', ARRAY['{l}', 'ok']::rty_mood[])")
        })
        .collect();
    insert_rows(&c, "rty_t", "id, m, ms", &rows).await;

    // A keyed read: columns and values as the first shard's types.
    let read = c
        .prepare("SELECT id, m, ms FROM rty_t WHERE id = $1")
        .await
        .expect("prepare a keyed read");
    assert_eq!(read.columns()[1].type_().oid(), mood[0]);
    assert_eq!(read.columns()[1].type_().name(), "rty_mood");
    assert_eq!(read.columns()[2].type_().oid(), moods[0]);
    for id in 1..=40i64 {
        let row = c.query_one(&read, &[&id]).await.expect("keyed read");
        assert_eq!(row.get::<_, Label>(1), label(id));
        assert_eq!(
            row.get::<_, Vec<Label>>(2),
            vec![label(id), Label("ok".into())]
        );
    }
    // Unprepared (the unnamed statement, described anew each time), on whichever shard.
    for id in [1i64, 2, 3, 17, 40] {
        let row = c
            .query_one("SELECT m FROM rty_t WHERE id = $1", &[&id])
            .await
            .expect("unnamed keyed read");
        assert_eq!(row.get::<_, Label>(0), label(id));
    }

    // An enum parameter: described with the first shard's OID, bound on every shard.
    let count = c
        .prepare("SELECT count(*) FROM rty_t WHERE m = $1")
        .await
        .expect("prepare a read over every shard");
    assert_eq!(count.params()[0].oid(), mood[0]);
    let ok: i64 = c
        .query_one(&count, &[&Label("ok".into())])
        .await
        .expect("count by enum")
        .get(0);
    assert_eq!(ok, (1..=40).filter(|i| i % 3 == 1).count() as i64);

    // Declared parameter types, as a driver that registered the type sends them: the Parse
    // reaching the third or fourth shard names their own OID.
    let enum_type = count.params()[0].clone();
    let typed = c
        .prepare_typed(
            "SELECT id FROM rty_t WHERE id = $1 AND m = $2",
            &[Type::INT8, enum_type],
        )
        .await
        .expect("prepare with declared types");
    for id in 1..=40i64 {
        let rows = c
            .query(&typed, &[&id, &label(id)])
            .await
            .expect("typed read");
        assert_eq!(rows.len(), 1, "id {id}");
    }
    let written = c
        .execute(
            "INSERT INTO rty_t (id, m) VALUES ($1, $2)",
            &[&41i64, &Label("happy".into())],
        )
        .await
        .expect("insert an enum parameter");
    assert_eq!(written, 1);
    let happy: i64 = c
        .query_one(&count, &[&Label("happy".into())])
        .await
        .expect("count by enum")
        .get(0);
    assert_eq!(happy, 1 + (1..=40).filter(|i| i % 3 == 2).count() as i64);

    // The general path copies the shards' rows in binary into a table on the first shard,
    // binary arrays of the enum among them.
    exec(
        &c,
        "CREATE SHARDED TABLE rty_other (id bigint PRIMARY KEY, v int8) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO TABLESPACE SET rty_tsa",
    )
    .await;
    let rows: Vec<String> = (1..=40).map(|i| format!("({}, {i})", 100 + i)).collect();
    insert_rows(&c, "rty_other", "id, v", &rows).await;
    let joined = simple_rows(
        &c,
        "SELECT t.id, t.ms FROM rty_t t JOIN rty_other o ON o.v = t.id ORDER BY t.id",
    )
    .await;
    let want: Vec<Vec<Option<String>>> = (1..=40i64)
        .map(|i| {
            let l = label(i).0;
            vec![Some(i.to_string()), Some(format!("{{{l},ok}}"))]
        })
        .collect();
    assert_eq!(joined, want);
}

/// A type made after the proxy started, and one made directly on the shards (as another proxy
/// would): the first answer that names an OID the proxy does not know yet has the proxy read
/// the types again, and the next statements see the first shard's OIDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_made_later_are_learned() {
    let proxy = start();
    let c = proxy.connect().await;
    tablespaces(&c, "rtl").await;
    exec(
        &c,
        "CREATE SHARDED TABLE rtl_t (id bigint PRIMARY KEY, v int) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO TABLESPACE SET rtl_tsb",
    )
    .await;
    exec(
        &c,
        "INSERT INTO rtl_t VALUES (1, 1), (2, 2), (3, 3), (4, 4)",
    )
    .await;
    for i in 0..SHARDS {
        shards()
            .connect(i)
            .await
            .batch_execute("CREATE TYPE rtl_late AS ENUM ('a', 'b')")
            .await
            .expect("type made on a shard directly");
    }
    let late = oids_on_shards("rtl_late").await;
    assert!(late[2] != late[0] && late[3] != late[0], "{late:?}");
    let sql = "SELECT id, 'b'::rtl_late AS l FROM rtl_t WHERE id = $1";
    // The first description may name the shard's own OID; it marks the types to be read.
    let _ = c.prepare(sql).await;
    let st = c
        .prepare(sql)
        .await
        .expect("prepare after the types were read");
    assert_eq!(st.columns()[1].type_().oid(), late[0]);
    for id in 1..=4i64 {
        let row = c.query_one(&st, &[&id]).await.expect("read");
        assert_eq!(row.get::<_, Label>(1), Label("b".into()));
    }
}
