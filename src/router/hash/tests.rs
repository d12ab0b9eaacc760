//! Known vectors, each obtained by hand from PostgreSQL 15.18 with the `hash*extended(value,
//! 8816678312871386365)` SQL functions or `satisfies_hash_partition()`.

use super::*;

fn hash(ty: &str, text: &str) -> u64 {
    let ty = KeyType::from_pg_type_name(ty).unwrap();
    hash_value(ty, &KeyValue::Text(text)).unwrap().unwrap()
}

/// The SQL functions return bigint; the vectors are written as PostgreSQL printed them.
fn pg(v: i64) -> u64 {
    v as u64
}

#[test]
fn jenkins_without_seed_matches_hash_any() {
    // hashtextextended('abc', 0): a zero seed must skip the seed mixing step.
    assert_eq!(
        jenkins::hash_bytes_extended(b"abc", 0),
        pg(-6747756470228489321)
    );
}

#[test]
fn integers_hash_like_postgres() {
    assert_eq!(hash("integer", "0"), pg(-4403592609991167795));
    assert_eq!(hash("int4", " +1 "), pg(5968994663651403477));
    assert_eq!(hash("integer", "-1"), pg(-5017072347659237694));
    assert_eq!(hash("bigint", "5000000000"), pg(-2799505259769899283));
    assert_eq!(hash("bigint", "-7"), pg(-7298374200968567817));
    assert_eq!(hash("smallint", "-7"), pg(-7298374200968567817));
}

#[test]
fn strings_hash_like_postgres() {
    assert_eq!(hash("text", ""), pg(-5700645584453517373));
    assert_eq!(hash("varchar(5)", "héllo"), pg(3506307356728073920));
    assert_eq!(
        hash("character varying", "abcdefghijklmnopqrstuvwxyz"),
        pg(-7171292135076916904)
    );
    assert_eq!(hash("bpchar", "ab   "), pg(596009030900183869));
    assert_eq!(hash("character(2)", "ab    "), pg(596009030900183869));
}

#[test]
fn numerics_hash_like_postgres() {
    assert_eq!(hash("numeric", "1.5"), pg(1234047083305210387));
    assert_eq!(hash("decimal", "-1.50"), pg(1234047083305210387));
    assert_eq!(hash("numeric", " 15e-1 "), pg(1234047083305210387));
    assert_eq!(hash("numeric", "-0"), HASH_PARTITION_SEED - 1);
    assert_eq!(hash("numeric", "NaN"), HASH_PARTITION_SEED);
    assert_eq!(hash("numeric", "0.00012"), pg(3073084697884637736));
    assert_eq!(
        hash("numeric", "123456789.987654321"),
        pg(-208004492532973033)
    );
    // numeric(10,1) rounds 1.45 half away from zero to 1.5 before routing.
    assert_eq!(hash("numeric(10,1)", "1.45"), pg(1234047083305210387));
}

#[test]
fn floats_hash_like_postgres() {
    assert_eq!(hash("double precision", "NaN"), pg(-6475869854796787835));
    assert_eq!(hash("float8", "-0"), HASH_PARTITION_SEED);
    assert_eq!(hash("float8", "1.5"), pg(-2826383321045882978));
    assert_eq!(hash("real", "0.1"), pg(-6747671251798447639));
}

#[test]
fn small_types_hash_like_postgres() {
    assert_eq!(hash("boolean", "yes"), pg(5968994663651403477));
    assert_eq!(hash("bool", "f"), pg(-4403592609991167795));
    assert_eq!(hash("\"char\"", ""), pg(-4403592609991167795));
    // "char" is signed: the first byte of 'é' (0xC3) is -61.
    assert_eq!(hash("\"char\"", "é"), pg(6389800142120537001));
    assert_eq!(
        hash("uuid", "{A0EEBC99-9C0B4EF8-BB6D-6BB9BD380A11}"),
        pg(424513190990560493)
    );
}

#[test]
fn dates_and_timestamps_hash_like_postgres() {
    assert_eq!(hash("date", "2020-01-02"), pg(3515149738037471712));
    assert_eq!(
        hash("timestamp", "2020-01-02T03:04:05.678901"),
        pg(-4949810710337675485)
    );
    assert_eq!(
        hash("timestamptz", "2020-01-02 03:04:05.678901+05:30"),
        pg(-3937173426268214941)
    );
    assert_eq!(
        hash("timestamp with time zone", "2020-01-01 21:34:05.678901Z"),
        pg(-3937173426268214941)
    );
}

#[test]
fn rows_land_where_postgres_puts_them() {
    let row = [
        (KeyType::Int8, KeyValue::Text("42")),
        (KeyType::Text, KeyValue::Text("héllo")),
    ];
    assert_eq!(remainder(partition_hash(&row).unwrap(), 16), 5);
    let with_null = [
        (KeyType::Int8, KeyValue::Null),
        (KeyType::Text, KeyValue::Text("héllo")),
    ];
    assert_eq!(remainder(partition_hash(&with_null).unwrap(), 7), 4);
    let uuid = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
    let three = [
        (KeyType::Numeric(None), KeyValue::Text("1.50")),
        (KeyType::Date, KeyValue::Null),
        (KeyType::Uuid, KeyValue::Text(uuid)),
    ];
    assert_eq!(remainder(partition_hash(&three).unwrap(), 32), 19);
    let three = [
        (KeyType::Numeric(None), KeyValue::Text("-12345.678")),
        (KeyType::Date, KeyValue::Text("2024-02-29")),
        (KeyType::Uuid, KeyValue::Text(uuid)),
    ];
    assert_eq!(remainder(partition_hash(&three).unwrap(), 1001), 503);
}

#[test]
fn binary_parameters_hash_like_text() {
    let int8 = KeyValue::Binary(&[0, 0, 0, 1, 42, 5, 242, 0]);
    assert_eq!(
        hash_value(KeyType::Int8, &int8).unwrap(),
        Some(hash("bigint", "5000000000"))
    );
    let short = hash_value(KeyType::Int4, &KeyValue::Binary(&[1, 2]));
    assert!(matches!(
        short,
        Err(HashError::BinaryLength {
            expected: 4,
            got: 2,
            ..
        })
    ));
}

#[test]
fn type_names_follow_postgres() {
    let cases = [
        ("INTEGER", KeyType::Int4),
        ("pg_catalog.int8", KeyType::Int8),
        (
            "numeric(10, 2)",
            KeyType::Numeric(Some(NumericTypmod {
                precision: 10,
                scale: 2,
            })),
        ),
        ("character varying(20)", KeyType::Varchar(Some(20))),
        ("char", KeyType::Bpchar(Some(1))),
        ("bpchar", KeyType::Bpchar(None)),
        ("\"char\"", KeyType::Char),
        ("timestamp(3) with time zone", KeyType::Timestamptz(Some(3))),
        ("timestamp   without time zone", KeyType::Timestamp(None)),
        ("float(24)", KeyType::Float4),
        ("double precision", KeyType::Float8),
    ];
    for (name, ty) in cases {
        assert_eq!(KeyType::from_pg_type_name(name).unwrap(), ty, "{name}");
        // Display prints format_type()'s spelling, which must read back as the same type.
        assert_eq!(KeyType::from_pg_type_name(&ty.to_string()).unwrap(), ty);
    }
    assert!(matches!(
        KeyType::from_pg_type_name("jsonb"),
        Err(KeyTypeError::UnsupportedType { .. })
    ));
}

#[test]
fn input_errors_match_postgres() {
    let err = |ty: &str, text: &str| {
        let ty = KeyType::from_pg_type_name(ty).unwrap();
        hash_value(ty, &KeyValue::Text(text)).unwrap_err()
    };
    assert!(matches!(err("int2", "32768"), HashError::OutOfRange { .. }));
    assert!(matches!(err("int4", "12a"), HashError::InvalidInput { .. }));
    assert!(matches!(
        err("numeric(3,1)", "100"),
        HashError::NumericFieldOverflow { .. }
    ));
    assert!(matches!(
        err("varchar(2)", "abc"),
        HashError::ValueTooLong { .. }
    ));
    assert!(matches!(
        err("date", "2023-02-29"),
        HashError::OutOfRange { .. }
    ));
    let ambiguous = err("timestamptz", "2020-01-02 03:04:05");
    assert!(matches!(ambiguous, HashError::AmbiguousTimeZone { .. }));
    assert!(ambiguous.needs_server());
    assert!(err("timestamp", "now").needs_server());
}

#[test]
fn plain_integers_hash_as_the_general_decoder_reads_them() {
    let spellings = [
        "0",
        "-0",
        "7",
        "-7",
        "0042",
        "9999",
        "-9999",
        "32767",
        "-32768",
        "32768",
        "99999",
        "999999999",
        "-999999999",
        "2147483647",
        "-2147483648",
        "2147483648",
        "999999999999999999",
        "-999999999999999999",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "+5",
        " 5",
        "5 ",
        "",
        "-",
        "1e3",
        "x",
    ];
    for ty in [KeyType::Int2, KeyType::Int4, KeyType::Int8] {
        for s in spellings {
            let value = KeyValue::Text(s);
            assert_eq!(
                hash_value(ty, &value),
                hash_decoded(ty, &value),
                "{ty} {s:?}"
            );
        }
        for bytes in [
            &[0u8, 5][..],
            &[0xff; 4],
            &[0x80, 0, 0, 0, 0, 0, 0, 1],
            &[1, 2, 3],
        ] {
            let value = KeyValue::Binary(bytes);
            assert_eq!(
                hash_value(ty, &value),
                hash_decoded(ty, &value),
                "{ty} {bytes:?}"
            );
        }
    }
}
