//! Unit tests of COPY's option parsing, row splitting and field decoding.

use super::*;
use crate::router::plan::{CopyArg, CopyOption};

fn opt(name: &str, arg: CopyArg) -> CopyOption {
    CopyOption {
        name: name.into(),
        arg,
    }
}

fn text(s: &str) -> CopyArg {
    CopyArg::Text(s.into())
}

fn csv() -> CopyFormat {
    CopyFormat::from_options(&[opt("format", text("csv"))]).unwrap()
}

fn rows(format: &CopyFormat, chunks: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut s = RowSplitter::new(format);
    let mut out = Vec::new();
    for c in chunks {
        s.feed(c, |r| {
            out.push(r.to_vec());
            Ok::<_, ()>(())
        })
        .unwrap();
    }
    let (last, open) = s.finish();
    assert!(!open);
    out.extend(last);
    out
}

#[test]
fn options_default_by_format_and_read_like_postgres() {
    let t = CopyFormat::from_options(&[]).unwrap();
    assert_eq!(
        (t.csv, t.delimiter, t.null.as_slice()),
        (false, b'\t', &b"\\N"[..])
    );
    let c = csv();
    assert_eq!(
        (c.delimiter, c.null.as_slice(), c.quote, c.escape),
        (b',', &b""[..], b'"', b'"')
    );
    let c = CopyFormat::from_options(&[
        opt("format", text("CSV")),
        opt("header", CopyArg::None),
        opt("quote", text("'")),
        opt("delimiter", text(";")),
        opt("null", text("NULL")),
        opt("force_null", CopyArg::List(vec!["id".into()])),
    ])
    .unwrap();
    assert_eq!(
        (c.header, c.quote, c.escape, c.delimiter),
        (Header::Skip, b'\'', b'\'', b';')
    );
    assert_eq!(c.null, b"NULL");
    assert!(c.force_null.covers("id") && !c.force_null.covers("x"));
    let m = CopyFormat::from_options(&[opt("header", text("match"))]).unwrap();
    assert_eq!(m.header, Header::Match);
    let off = CopyFormat::from_options(&[opt("header", CopyArg::Number("0".into()))]).unwrap();
    assert_eq!(off.header, Header::None);
    assert!(CopyFormat::from_options(&[opt("delimiter", text("ab"))]).is_err());
    assert!(CopyFormat::from_options(&[opt("quote", text("'"))]).is_err());
    assert!(CopyFormat::from_options(&[opt("format", text("xml"))]).is_err());
    assert!(
        CopyFormat::from_options(&[opt("format", text("binary"))])
            .unwrap()
            .binary
    );
}

#[test]
fn text_rows_end_at_unescaped_newlines_across_chunks() {
    let f = CopyFormat::from_options(&[]).unwrap();
    let got = rows(
        &f,
        &[b"1\ta\n2\tb\\", b"\nc\n3", b"\tx\r\n4\t\\\\", b"\n5\tlast"],
    );
    assert_eq!(
        got,
        vec![
            b"1\ta\n".to_vec(),
            b"2\tb\\\nc\n".to_vec(),
            b"3\tx\r\n".to_vec(),
            b"4\t\\\\\n".to_vec(),
            b"5\tlast".to_vec(),
        ]
    );
}

#[test]
fn csv_rows_keep_newlines_inside_quotes() {
    let got = rows(
        &csv(),
        &[b"1,\"a\nb\",x\n2,\"say \"\"hi", b"\"\" \nthere\"\n3,,\n"],
    );
    assert_eq!(
        got,
        vec![
            b"1,\"a\nb\",x\n".to_vec(),
            b"2,\"say \"\"hi\"\" \nthere\"\n".to_vec(),
            b"3,,\n".to_vec(),
        ]
    );
    // With an escape other than the quote, an escaped quote does not close the field.
    let f =
        CopyFormat::from_options(&[opt("format", text("csv")), opt("escape", text("\\"))]).unwrap();
    let got = rows(&f, &[b"1,\"a\\\"\nb\"\n2,c\n"]);
    assert_eq!(got, vec![b"1,\"a\\\"\nb\"\n".to_vec(), b"2,c\n".to_vec()]);
    let mut s = RowSplitter::new(&csv());
    s.feed(b"1,\"open\n", |_| Err::<(), _>("no row yet"))
        .unwrap();
    assert_eq!(s.finish(), (Some(b"1,\"open\n".to_vec()), true));
}

#[test]
fn text_fields_split_at_unescaped_delimiters_and_unescape() {
    let fields = text_fields(b"a\\\tb\tc\\\\\t\\N\t", b'\t', 10);
    assert_eq!(fields, vec![&b"a\\\tb"[..], b"c\\\\", b"\\N", b""]);
    assert_eq!(text_fields(b"1\t2\t3", b'\t', 0), vec![&b"1"[..]]);
    assert_eq!(
        &*text_unescape(b"a\\tb\\n\\\\\\101\\x41\\x4a\\xg\\q"),
        b"a\tb\n\\AAJxgq"
    );
    assert_eq!(&*text_unescape(b"\\0"), b"\0");
    assert!(matches!(text_unescape(b"plain"), Cow::Borrowed(_)));
}

#[test]
fn csv_fields_resolve_quotes_and_escapes() {
    let f = csv();
    let got = csv_fields(b"1,\"a,b\",\"x\"\"y\",,\"\",ab\"c\"d", &f, 10).unwrap();
    let vals: Vec<(&[u8], bool)> = got.iter().map(|c| (&*c.value, c.quoted)).collect();
    assert_eq!(
        vals,
        vec![
            (&b"1"[..], false),
            (b"a,b", true),
            (b"x\"y", true),
            (b"", false),
            (b"", true),
            (b"abcd", true),
        ]
    );
    let trailing = csv_fields(b"1,", &f, 10).unwrap();
    assert_eq!(trailing.len(), 2);
    assert!(csv_fields(b"1,\"open", &f, 10).is_err());
    let esc =
        CopyFormat::from_options(&[opt("format", text("csv")), opt("escape", text("\\"))]).unwrap();
    let got = csv_fields(b"\"a\\\"b\\\\c\\d\"", &esc, 0).unwrap();
    assert_eq!(&*got[0].value, b"a\"b\\c\\d");
}

#[test]
fn end_marker_and_line_content() {
    assert!(is_end_marker(b"\\.\n"));
    assert!(is_end_marker(b"\\.\r\n"));
    assert!(!is_end_marker(b"\\.x\n"));
    assert_eq!(line_content(b"a\r\n"), b"a");
}
