//! Checks shardwire's hash routing against PostgreSQL itself: for generated values of every
//! supported key type, and for multi-column keys with NULLs, the remainder we compute must be
//! the one `satisfies_hash_partition()` accepts on a real server, for text and binary input.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shardwire::router::hash::{hash_value, partition_hash, remainder, KeyType, KeyValue};
use tokio_postgres::{Client, NoTls};

const MODULI: [u64; 3] = [7, 16, 32];
const VALUES_PER_TYPE: usize = 300;

/// A throwaway PostgreSQL cluster, stopped and deleted on drop (also when a test panics).
struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

fn server_bin_dir() -> PathBuf {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    candidates.sort();
    candidates
        .pop()
        .expect("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
}

fn running_as_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("run id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

impl Cluster {
    fn start() -> Cluster {
        let bin = server_bin_dir();
        let dir = tempfile::tempdir().expect("create temp dir");
        if running_as_root() {
            // initdb and postgres refuse to run as root.
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown of the cluster dir failed");
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("find a free port")
            .port();
        let cluster = Cluster { bin, dir, port };
        let data = cluster.data_dir();
        cluster.run(
            "initdb",
            &["-D", &data, "-U", "postgres", "-A", "trust", "--no-sync"],
        );
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            cluster.dir.path().display()
        );
        let log = cluster.dir.path().join("log").display().to_string();
        cluster.run(
            "pg_ctl",
            &["-D", &data, "-o", &options, "-l", &log, "-w", "start"],
        );
        cluster
    }

    fn data_dir(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if running_as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        let out = self
            .command(program)
            .args(args)
            .current_dir(Path::new("/"))
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    async fn connect(&self) -> Client {
        let conn = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        );
        let (client, connection) = tokio_postgres::connect(&conn, NoTls)
            .await
            .expect("connect to the test cluster");
        tokio::spawn(connection);
        client
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data_dir();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// One key column under test: how to declare it, its binary send function, and its values.
struct Column {
    sql_type: &'static str,
    send_fn: &'static str,
    values: Vec<Option<String>>,
}

fn pick<'a>(rng: &mut StdRng, options: &[&'a str]) -> &'a str {
    options[rng.gen_range(0..options.len())]
}

fn pad(rng: &mut StdRng, s: String) -> String {
    let ws = [" ", "  ", "\t", "\n"];
    match rng.gen_range(0..4) {
        0 => format!("{}{s}{}", pick(rng, &ws), pick(rng, &ws)),
        _ => s,
    }
}

fn int_value(rng: &mut StdRng, bits: u32) -> String {
    let max = (1i128 << (bits - 1)) - 1;
    let v: i128 = match rng.gen_range(0..6) {
        0 => [0, 1, -1, max, -max - 1][rng.gen_range(0..5)],
        1 => rng.gen_range(-1000..1000),
        _ => rng.gen_range(-max - 1..=max),
    };
    let sign = if v >= 0 && rng.gen_bool(0.2) { "+" } else { "" };
    pad(rng, format!("{sign}{v}"))
}

fn digit_string(rng: &mut StdRng, max_len: usize) -> String {
    let len = rng.gen_range(1..=max_len);
    (0..len)
        .map(|_| char::from(b'0' + rng.gen_range(0..10)))
        .collect()
}

fn numeric_value(rng: &mut StdRng) -> String {
    if rng.gen_bool(0.05) {
        return pick(
            rng,
            &["NaN", "nan", "Infinity", "-Infinity", "-0", "0.000", "-0e5"],
        )
        .into();
    }
    let sign = pick(rng, &["", "-", "+"]);
    let int = digit_string(rng, 12);
    let mut s = format!("{sign}{int}");
    if rng.gen_bool(0.7) {
        s.push('.');
        s.push_str(&digit_string(rng, 12));
        if rng.gen_bool(0.3) {
            s.push_str("000");
        }
    }
    if rng.gen_bool(0.25) {
        s.push_str(&format!("e{}", rng.gen_range(-30..30)));
    }
    pad(rng, s)
}

fn string_value(rng: &mut StdRng, max_chars: usize) -> String {
    let alphabet = [
        'a', 'Z', '0', ' ', 'é', 'ß', '€', '日', '😀', '\'', '\\', '-',
    ];
    let len = rng.gen_range(0..=max_chars);
    (0..len)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
        .collect()
}

fn bytea_value(rng: &mut StdRng) -> String {
    let bytes: Vec<u8> = (0..rng.gen_range(0..24)).map(|_| rng.gen()).collect();
    if rng.gen_bool(0.5) {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        return format!("\\x{hex}");
    }
    bytes
        .iter()
        .map(|&b| match b {
            b'\\' => "\\\\".to_string(),
            0x20..=0x7e => char::from(b).to_string(),
            _ => format!("\\{b:03o}"),
        })
        .collect()
}

fn uuid_value(rng: &mut StdRng) -> String {
    let hex: String = (0..16)
        .map(|_| format!("{:02x}", rng.gen::<u8>()))
        .collect();
    let hex = if rng.gen_bool(0.5) {
        hex.to_uppercase()
    } else {
        hex
    };
    match rng.gen_range(0..4) {
        0 => hex,
        1 => format!("{{{hex}}}"),
        2 => format!(
            "{}-{}-{}-{}",
            &hex[..8],
            &hex[8..16],
            &hex[16..24],
            &hex[24..]
        ),
        _ => format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        ),
    }
}

fn date_part(rng: &mut StdRng) -> String {
    let month = rng.gen_range(1..=12);
    let day = rng.gen_range(1..=28);
    match rng.gen_range(0..10) {
        0 => format!("{:04}-{month:02}-{day:02} BC", rng.gen_range(1..4000)),
        1 => "2024-02-29".to_string(),
        2 => format!("{}-{month}-{day}", rng.gen_range(10000..200000)),
        _ => format!("{:04}-{month:02}-{day:02}", rng.gen_range(1..10000)),
    }
}

fn time_part(rng: &mut StdRng) -> String {
    let (h, m, s) = (
        rng.gen_range(0..24),
        rng.gen_range(0..60),
        rng.gen_range(0..60),
    );
    match rng.gen_range(0..5) {
        0 => format!("{h:02}:{m:02}"),
        1 => format!("{h}:{m:02}:{s:02}"),
        2 => pick(rng, &["24:00:00", "23:59:60", "00:00:00.9999995"]).into(),
        _ => format!("{h:02}:{m:02}:{s:02}.{}", digit_string(rng, 9)),
    }
}

fn offset(rng: &mut StdRng) -> String {
    let sign = pick(rng, &["+", "-"]);
    let (h, m) = (rng.gen_range(0..15), rng.gen_range(0..60));
    match rng.gen_range(0..6) {
        0 => pick(rng, &["Z", " UTC", "z"]).into(),
        1 => format!("{sign}{h:02}"),
        2 => format!("{sign}{h:02}{m:02}"),
        3 => format!(" {sign}{h}:{m:02}"),
        _ => format!("{sign}{h:02}:{m:02}"),
    }
}

fn timestamp_value(rng: &mut StdRng, zone: bool) -> String {
    if rng.gen_bool(0.03) {
        return pick(rng, &["infinity", "-infinity", "epoch", "Infinity"]).into();
    }
    let date = date_part(rng);
    let (date, era) = match date.strip_suffix(" BC") {
        Some(d) => (d.to_string(), " BC"),
        None => (date, ""),
    };
    let sep = pick(rng, &[" ", "T", "  "]);
    let time = time_part(rng);
    let zone = if zone || rng.gen_bool(0.2) {
        offset(rng)
    } else {
        String::new()
    };
    pad(rng, format!("{date}{sep}{time}{zone}{era}"))
}

fn float_value(rng: &mut StdRng, single: bool) -> String {
    if rng.gen_bool(0.08) {
        return pick(rng, &["NaN", "-0", "0", "Infinity", "-inf", "1e-40"]).into();
    }
    let v: f64 = if single {
        f64::from(rng.gen_range(-1e6f32..1e6f32))
    } else {
        rng.gen_range(-1e12..1e12)
    };
    match rng.gen_range(0..4) {
        0 => format!("{v:e}"),
        1 => format!("{}", v / 1e9),
        2 => format!("{:.3}", v),
        _ => pad(rng, format!("{v}")),
    }
}

fn columns(rng: &mut StdRng) -> Vec<Column> {
    type Gen = fn(&mut StdRng) -> String;
    let specs: [(&str, &str, Gen); 18] = [
        ("smallint", "int2send", |r| int_value(r, 16)),
        ("integer", "int4send", |r| int_value(r, 32)),
        ("bigint", "int8send", |r| int_value(r, 64)),
        ("numeric", "numeric_send", numeric_value),
        ("numeric(12,2)", "numeric_send", |r| {
            let v = format!("{}.{}", rng_int(r, 9_999_999), digit_string(r, 5));
            pad(r, v)
        }),
        ("text", "textsend", |r| string_value(r, 40)),
        ("varchar(8)", "varcharsend", |r| {
            let s = string_value(r, 8);
            if r.gen_bool(0.3) {
                s + "    "
            } else {
                s
            }
        }),
        ("character(6)", "bpcharsend", |r| string_value(r, 6) + "  "),
        ("bytea", "byteasend", bytea_value),
        ("boolean", "boolsend", |r| {
            pick(
                r,
                &[
                    "t", "TRUE", " yes ", "on", "1", "f", "False", "n", "off", "0", "of",
                ],
            )
            .into()
        }),
        ("\"char\"", "charsend", |r| {
            pick(r, &["a", "Z", "", "é", "\\101", "\\377", "ab", " "]).into()
        }),
        ("date", "date_send", |r| {
            if r.gen_bool(0.05) {
                return pick(r, &["infinity", "-infinity", "epoch"]).into();
            }
            let mut d = date_part(r);
            if !d.ends_with("BC") && r.gen_bool(0.2) {
                // date_in accepts and ignores a time of day and an offset.
                d = format!("{d} {}{}", time_part(r), offset(r));
            }
            pad(r, d)
        }),
        ("timestamp", "timestamp_send", |r| timestamp_value(r, false)),
        ("timestamp(0)", "timestamp_send", |r| {
            timestamp_value(r, false)
        }),
        ("timestamptz", "timestamptz_send", |r| {
            timestamp_value(r, true)
        }),
        ("uuid", "uuid_send", uuid_value),
        ("real", "float4send", |r| float_value(r, true)),
        ("double precision", "float8send", |r| float_value(r, false)),
    ];
    specs
        .into_iter()
        .map(|(sql_type, send_fn, gen)| Column {
            sql_type,
            send_fn,
            values: (0..VALUES_PER_TYPE).map(|_| Some(gen(rng))).collect(),
        })
        .collect()
}

fn rng_int(rng: &mut StdRng, max: i64) -> i64 {
    rng.gen_range(-max..=max)
}

/// The type a binary parameter of this column is declared with: the base type, no typmod.
fn base_type(sql_type: &str) -> &str {
    match sql_type.split('(').next().unwrap_or(sql_type) {
        // A bare "character" means char(1); the unbounded type is bpchar.
        "character" => "bpchar",
        base => base,
    }
}

/// Asks PostgreSQL for each value's binary encoding and for the remainder it accepts per modulus.
async fn oracle(client: &Client, table: &str, cols: &[&Column]) -> Vec<(Vec<Vec<u8>>, Vec<i32>)> {
    let defs: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| format!("c{i} {}", c.sql_type))
        .collect();
    let names: Vec<String> = (0..cols.len()).map(|i| format!("c{i}")).collect();
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} ({}) PARTITION BY HASH ({})",
            defs.join(", "),
            names.join(", ")
        ))
        .await
        .expect("create probe table");
    let typed: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| format!("v{i}::{}", c.sql_type))
        .collect();
    let sends: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "coalesce({}(v{i}::{}), '')",
                c.send_fn,
                base_type(c.sql_type)
            )
        })
        .collect();
    let remainders: Vec<String> = MODULI
        .iter()
        .map(|m| {
            format!(
                "(SELECT r FROM generate_series(0, {}) r \
                 WHERE satisfies_hash_partition('{table}'::regclass, {m}, r, {}))",
                m - 1,
                typed.join(", ")
            )
        })
        .collect();
    let unnest_args: Vec<String> = (0..cols.len())
        .map(|i| format!("${}::text[]", i + 1))
        .collect();
    let vars: Vec<String> = (0..cols.len()).map(|i| format!("v{i}")).collect();
    let sql = format!(
        "SELECT ARRAY[{}], ARRAY[{}] FROM unnest({}) WITH ORDINALITY AS u({}, ord) ORDER BY ord",
        sends.join(", "),
        remainders.join(", "),
        unnest_args.join(", "),
        vars.join(", ")
    );
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = cols
        .iter()
        .map(|c| &c.values as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect();
    let rows = client.query(&sql, &params).await.expect("oracle query");
    rows.iter()
        .map(|row| {
            let remainders: Vec<Option<i32>> = row.get(1);
            // A NULL means no remainder satisfied PostgreSQL: impossible for a valid value.
            let remainders = remainders
                .into_iter()
                .map(|r| r.expect("PostgreSQL accepts exactly one remainder"))
                .collect();
            (row.get(0), remainders)
        })
        .collect()
}

fn key_type(sql_type: &str) -> KeyType {
    KeyType::from_pg_type_name(sql_type).unwrap_or_else(|e| panic!("{sql_type}: {e}"))
}

/// Compares one table's rows: text input and (for non-NULL values) binary input must both give
/// PostgreSQL's remainder for every modulus.
fn check_rows(cols: &[&Column], rows: &[(Vec<Vec<u8>>, Vec<i32>)]) {
    for (i, (binaries, expected)) in rows.iter().enumerate() {
        let text_key: Vec<(KeyType, KeyValue)> = cols
            .iter()
            .map(|c| match &c.values[i] {
                Some(v) => (key_type(c.sql_type), KeyValue::Text(v)),
                None => (key_type(c.sql_type), KeyValue::Null),
            })
            .collect();
        let binary_key: Vec<(KeyType, KeyValue)> = cols
            .iter()
            .zip(binaries)
            .map(|(c, b)| match &c.values[i] {
                Some(_) => (key_type(c.sql_type), KeyValue::Binary(b)),
                None => (key_type(c.sql_type), KeyValue::Null),
            })
            .collect();
        for (form, key) in [("text", &text_key), ("binary", &binary_key)] {
            let hash = partition_hash(key).unwrap_or_else(|e| panic!("{form} {key:?}: {e}"));
            let ours: Vec<i32> = MODULI.iter().map(|&m| remainder(hash, m) as i32).collect();
            assert_eq!(&ours, expected, "{form} input {key:?}");
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn remainders_match_satisfies_hash_partition() {
    let cluster = Cluster::start();
    let client = cluster.connect().await;
    // Offsets in the input, not the session zone, must decide timestamptz values.
    client
        .batch_execute("SET TimeZone = 'Asia/Kathmandu'")
        .await
        .expect("set time zone");
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let cols = columns(&mut rng);

    for (n, col) in cols.iter().enumerate() {
        let rows = oracle(&client, &format!("single_{n}"), &[col]).await;
        check_rows(&[col], &rows);
    }

    let by_type = |name: &str| cols.iter().find(|c| c.sql_type == name).expect(name);
    let combos: [&[&str]; 4] = [
        &["bigint", "text"],
        &["numeric", "date", "uuid"],
        &["text", "integer", "timestamptz"],
        &[
            "boolean",
            "double precision",
            "bytea",
            "\"char\"",
            "smallint",
        ],
    ];
    for (n, names) in combos.iter().enumerate() {
        // Knock out some values so NULL skipping is exercised in every position.
        let with_nulls: Vec<Column> = names
            .iter()
            .map(|name| {
                let c = by_type(name);
                Column {
                    sql_type: c.sql_type,
                    send_fn: c.send_fn,
                    values: c
                        .values
                        .iter()
                        .map(|v| v.clone().filter(|_| !rng.gen_bool(0.15)))
                        .collect(),
                }
            })
            .collect();
        let refs: Vec<&Column> = with_nulls.iter().collect();
        let rows = oracle(&client, &format!("multi_{n}"), &refs).await;
        check_rows(&refs, &rows);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn values_postgres_rejects_are_rejected() {
    let cluster = Cluster::start();
    let client = cluster.connect().await;
    let cases = [
        ("smallint", "32768"),
        ("integer", "1.0"),
        ("bigint", "9223372036854775808"),
        ("numeric", "1e"),
        ("numeric(4,2)", "100"),
        ("numeric(4,2)", "Infinity"),
        ("varchar(3)", "abcd"),
        ("character(2)", "abc"),
        ("bytea", "\\x123"),
        ("boolean", "o"),
        ("date", "2023-02-29"),
        ("date", "0000-01-01"),
        ("timestamp", "2020-01-01 24:00:01"),
        ("timestamptz", "2020-01-01 10:00+16"),
        ("uuid", "a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11-"),
        ("real", "1e39"),
        ("double precision", "1e-400"),
    ];
    for (sql_type, input) in cases {
        // An INSERT of an untyped literal applies the column's input function and typmod the
        // way a routed INSERT does (an explicit cast would silently truncate varchar instead).
        let sql = format!(
            "DROP TABLE IF EXISTS rejects; CREATE TABLE rejects (k {sql_type}); \
             INSERT INTO rejects VALUES ('{}')",
            input.replace('\'', "''")
        );
        let server = client.batch_execute(&sql).await;
        assert!(
            server.is_err(),
            "PostgreSQL accepted {input:?} as {sql_type}"
        );
        let ours = hash_value(key_type(sql_type), &KeyValue::Text(input));
        match ours {
            Err(e) => assert!(!e.needs_server(), "{sql_type} {input:?}: {e}"),
            Ok(h) => panic!("{sql_type} {input:?} hashed to {h:?}, PostgreSQL rejects it"),
        }
    }
}
