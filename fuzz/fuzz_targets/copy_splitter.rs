//! A COPY … FROM STDIN into the fixture catalog, and arbitrary data for it, through the
//! splitter the session runs: the statement planned (its options, column list and key
//! positions), the options read as PostgreSQL reads them, the client's CopyData cut into rows
//! (rows spanning messages, CSV quotes across lines) and each row's key fields decoded and
//! placed on a shard.
//!
//! Input: the COPY statement up to the first NUL, then a byte giving the size of the CopyData
//! messages the data arrives in, then the data. Text and CSV rows, and the binary format's
//! header and tuples, are cut the same way.
//!
//! The rows a chunked stream is cut into, and where it fails, must be those of the whole stream
//! at once; text and CSV rows together must be the data, byte for byte, and binary pieces the
//! start of it: the session forwards them unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shardwire::executor::copy::{CopyError, CopyFormat, RowReader, RowRouter, Splitter};
use shardwire::router::plan::{self, Plan, Planned};
use shardwire_fuzz::{snapshot, Columns};

fuzz_target!(|data: &[u8]| {
    let Some(at) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let statement = String::from_utf8_lossy(&data[..at]);
    let Some((&chunk, stream)) = data[at + 1..].split_first() else {
        return;
    };
    let snapshot = snapshot();
    let Planned::Plan(Plan::Copy(plan)) = plan::plan(&statement, &snapshot, &Columns) else {
        return;
    };
    if !plan.from {
        return;
    }
    let Ok(format) = CopyFormat::from_options(&plan.options) else {
        return;
    };
    let whole = split(&format, [stream].into_iter());
    let chunked = split(&format, stream.chunks(usize::from(chunk) + 1));
    assert_eq!(whole, chunked, "the rows depend on how the data was cut");
    let pieces = whole.rows.concat();
    if format.binary {
        assert!(stream.starts_with(&pieces), "the pieces are not the data as sent");
    } else if whole.failed.is_none() {
        assert_eq!(pieces, stream, "the rows are not the data as sent");
        for row in &whole.rows[..whole.rows.len().saturating_sub(1)] {
            assert!(
                row.ends_with(b"\n"),
                "a row but the last ends without its newline"
            );
        }
    }
    if plan.duplicated || whole.failed.is_some() {
        return;
    }
    let mut reader = RowReader::new(RowRouter::new(
        snapshot.clone(),
        plan.table,
        format,
        &plan.columns,
        &plan.key_positions,
        plan.root_key,
    ));
    for row in &whole.rows {
        if reader.take(row).is_err() {
            break;
        }
    }
});

#[derive(Debug, PartialEq, Eq)]
struct Split {
    rows: Vec<Vec<u8>>,
    /// Why the data could not be cut (or end where it did).
    failed: Option<CopyError>,
}

/// The rows `messages` are cut into, the last one (without its newline) included.
fn split<'a>(format: &CopyFormat, messages: impl Iterator<Item = &'a [u8]>) -> Split {
    let mut splitter = Splitter::new(format);
    let mut rows = Vec::new();
    for message in messages {
        let fed = splitter.feed(message, |row| {
            rows.push(row.to_vec());
            Ok(())
        });
        if let Err(e) = fed {
            return Split {
                rows,
                failed: Some(e),
            };
        }
    }
    match splitter.finish("t", 0) {
        Ok(last) => {
            rows.extend(last);
            Split { rows, failed: None }
        }
        Err(e) => Split {
            rows,
            failed: Some(e),
        },
    }
}
