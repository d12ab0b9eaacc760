//! The parser's output against a real PostgreSQL server: every mapped type is a type PostgreSQL
//! creates as intended, and DEFAULT/CHECK source text is accepted unchanged.

mod ddl_common;

use ddl_common::create;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use shardwire::ddl::types::TypeOptions;
use shardwire::ddl::{ColumnConstraintBody, ConstraintBody};
use tokio_postgres::NoTls;

/// A throw-away PostgreSQL 15 cluster in a temp dir, stopped on drop.
struct TempCluster {
    _dir: tempfile::TempDir,
    data: PathBuf,
    port: u16,
}

fn pg_bin(name: &str) -> PathBuf {
    Path::new("/usr/lib/postgresql/15/bin").join(name)
}

/// initdb and postgres refuse to run as root.
fn as_postgres(cmd: &Path) -> Command {
    let uid = Command::new("id").arg("-u").output().unwrap().stdout;
    if String::from_utf8_lossy(&uid).trim() == "0" {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(cmd);
        c
    } else {
        Command::new(cmd)
    }
}

impl TempCluster {
    fn start() -> TempCluster {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status();
        assert!(chown.is_ok());
        let out = as_postgres(&pg_bin("initdb"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {out:?}");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            dir.path().display()
        );
        let out = as_postgres(&pg_bin("pg_ctl"))
            .args(["-w", "-l"])
            .arg(dir.path().join("log"))
            .arg("-D")
            .arg(&data)
            .args(["-o", &opts, "start"])
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_ctl start: {out:?}");
        TempCluster {
            _dir: dir,
            data,
            port,
        }
    }

    async fn connect(&self) -> tokio_postgres::Client {
        let conn = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        );
        let (client, connection) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }
}

impl Drop for TempCluster {
    fn drop(&mut self) {
        let _ = as_postgres(&pg_bin("pg_ctl"))
            .args(["-w", "-m", "immediate", "-D"])
            .arg(&self.data)
            .arg("stop")
            .output();
    }
}

#[tokio::test]
async fn mapped_types_are_the_postgres_types_users_expect() {
    let cluster = TempCluster::start();
    let client = cluster.connect().await;
    let cases = [
        ("NUMBER", "numeric"),
        ("NUMBER(10,2)", "numeric(10,2)"),
        ("NUMBER(*,0)", "numeric(38,0)"),
        ("VARCHAR2(50 BYTE)", "character varying(50)"),
        ("NVARCHAR2(20)", "character varying(20)"),
        ("NCHAR(3)", "character(3)"),
        ("DATE", "date"),
        ("DATE[]", "date[]"),
        ("TIMESTAMP(9)", "timestamp(6) without time zone"),
        ("TIMESTAMP WITH LOCAL TIME ZONE", "timestamp with time zone"),
        ("RAW(16)", "bytea"),
        ("LONG", "bigint"),
        ("STRING", "text"),
        ("JSON", "jsonb"),
        ("BINARY_FLOAT", "real"),
        ("FLOAT(126)", "double precision"),
        ("DOUBLE", "double precision"),
        ("RECORD(a TIMESTAMP(9), b STRING)", "jsonb"),
        ("ENUM(blue, green)", "text"),
        ("NUMBER(4)[]", "numeric(4,0)[]"),
        ("interval day to second(3)", "interval day to second(3)"),
    ];
    for (i, (written, expected)) in cases.iter().enumerate() {
        let t = create(&format!(
            "CREATE SHARDED TABLE t (k {written}, PRIMARY KEY (k))"
        ));
        let pg = t.columns[0].data_type.pg.to_string();
        client
            .batch_execute(&format!("CREATE TABLE t{i} (k {pg})"))
            .await
            .unwrap_or_else(|e| panic!("{written} → {pg}: {e}"));
        let row = client
            .query_one(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute \
                 WHERE attrelid = $1::text::regclass AND attname = 'k'",
                &[&format!("t{i}")],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), *expected, "{written}");
    }
    // Oracle's meaning, when the configuration asks for it.
    let oracle = TypeOptions { oracle_date: true };
    for (i, (written, expected)) in [
        ("DATE", "timestamp(0) without time zone"),
        ("DATE[]", "timestamp(0) without time zone[]"),
        ("date", "timestamp(0) without time zone"),
    ]
    .iter()
    .enumerate()
    {
        let t = create(&format!(
            "CREATE SHARDED TABLE t (k {written}, PRIMARY KEY (k))"
        ));
        let pg = t.columns[0].data_type.pg.clone().with_options(oracle);
        client
            .batch_execute(&format!("CREATE TABLE o{i} (k {pg})"))
            .await
            .unwrap_or_else(|e| panic!("{written} → {pg}: {e}"));
        let row = client
            .query_one(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute \
                 WHERE attrelid = $1::text::regclass AND attname = 'k'",
                &[&format!("o{i}")],
            )
            .await
            .unwrap();
        assert_eq!(
            row.get::<_, String>(0),
            *expected,
            "{written} (oracle_date)"
        );
    }
}

#[tokio::test]
async fn default_and_check_text_is_accepted_by_postgres_unchanged() {
    let cluster = TempCluster::start();
    let client = cluster.connect().await;
    let t = create(
        "CREATE SHARDED TABLE orders (
           id NUMBER PRIMARY KEY,
           created TIMESTAMP DEFAULT now() NOT NULL,
           status VARCHAR2(1) DEFAULT 'A' CHECK (status IN ('A', 'B')),
           note VARCHAR2(20) DEFAULT 'it''s' || ' ok',
           amount NUMBER(10,2) DEFAULT (1 + 2) * 3::numeric,
           color ENUM(blue, Green),
           CONSTRAINT positive CHECK (amount > 0 AND (amount < 1e9)))
         PARTITION BY CONSISTENT HASH (id)",
    );
    // The rewrite will render much more; here only what the parser hands over is used.
    let mut elements: Vec<String> = t
        .columns
        .iter()
        .map(|c| {
            let mut col = format!("{} {}", c.name.as_str(), c.data_type.pg);
            for constraint in &c.constraints {
                match &constraint.body {
                    ColumnConstraintBody::Default(e) => col += &format!(" DEFAULT {e}"),
                    ColumnConstraintBody::Check(e) => col += &format!(" CHECK ({e})"),
                    ColumnConstraintBody::NotNull => col += " NOT NULL",
                    ColumnConstraintBody::Null => col += " NULL",
                    ColumnConstraintBody::Identity { always, options } => {
                        col += if *always {
                            " GENERATED ALWAYS AS IDENTITY"
                        } else {
                            " GENERATED BY DEFAULT AS IDENTITY"
                        };
                        if let Some(o) = options {
                            col += &format!(" ({o})");
                        }
                    }
                }
            }
            for check in c.data_type.pg.checks(c.name.as_str()) {
                col += &format!(" CHECK ({check})");
            }
            col
        })
        .collect();
    for c in &t.constraints {
        if let ConstraintBody::Check(e) = &c.body {
            elements.push(format!("CHECK ({e})"));
        }
    }
    client
        .batch_execute(&format!("CREATE TABLE orders ({})", elements.join(", ")))
        .await
        .unwrap();
    let row = client
        .query_one(
            "INSERT INTO orders (id, amount, color) VALUES (1, 5, 'Green')
             RETURNING status, note, created IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "A");
    assert_eq!(row.get::<_, String>(1), "it's ok");
    assert!(row.get::<_, bool>(2));
    for bad in [
        "INSERT INTO orders (id, amount, status) VALUES (2, 5, 'Z')",
        "INSERT INTO orders (id, amount) VALUES (3, -1)",
        // NoSQL enum names are case-sensitive.
        "INSERT INTO orders (id, amount, color) VALUES (4, 5, 'green')",
    ] {
        let err = client.batch_execute(bad).await.unwrap_err();
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION),
            "{bad}"
        );
    }
}
