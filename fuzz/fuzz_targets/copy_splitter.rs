//! A COPY … FROM STDIN into the fixture catalog, and arbitrary data for it, through the
//! splitter the session runs: the statement planned (its options, column list and key
//! positions), the options read as PostgreSQL reads them, the client's CopyData cut into rows
//! (rows spanning messages, CSV quotes across lines) and each row's key fields decoded and
//! placed on a shard.
//!
//! Input: the COPY statement up to the first NUL, then a byte giving the size of the CopyData
//! messages the data arrives in, then the data. Binary COPY is never split (the session sends
//! it to a table's one shard, or refuses it), so it stops at the plan.
//!
//! The rows a chunked stream is cut into must be the rows the whole stream at once is cut into,
//! and together be the data, byte for byte: the session forwards them unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shardwire::executor::copy::{self, CopyFormat, Header, RowRouter, RowSplitter};
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
    if !plan.from || plan.binary() {
        return;
    }
    let Ok(format) = CopyFormat::from_options(&plan.options) else {
        return;
    };
    let router = (!plan.duplicated).then(|| {
        RowRouter::new(
            snapshot.clone(),
            plan.table,
            format.clone(),
            &plan.columns,
            &plan.key_positions,
            plan.root_key,
        )
    });

    let whole = split(&format, [stream].into_iter());
    let chunked = split(&format, stream.chunks(usize::from(chunk) + 1));
    assert_eq!(whole, chunked, "the rows depend on how the data was cut");
    assert_eq!(
        whole.rows.concat(),
        stream,
        "the rows are not the data as sent"
    );
    for row in &whole.rows[..whole.rows.len().saturating_sub(1)] {
        assert!(
            row.ends_with(b"\n"),
            "a row but the last ends without its newline"
        );
    }
    if let Some(router) = router {
        if !whole.open_quote {
            let mut reader = RowReader::new(format.header);
            for row in &whole.rows {
                if reader.take(row, &router).is_err() {
                    break;
                }
            }
        }
    }
});

#[derive(Debug, PartialEq, Eq)]
struct Split {
    rows: Vec<Vec<u8>>,
    open_quote: bool,
}

/// The rows `messages` are cut into, the last one (without its newline) included.
fn split<'a>(format: &CopyFormat, messages: impl Iterator<Item = &'a [u8]>) -> Split {
    let mut splitter = RowSplitter::new(format);
    let mut rows = Vec::new();
    for message in messages {
        splitter
            .feed(message, |row| {
                rows.push(row.to_vec());
                Ok::<(), ()>(())
            })
            .expect("collecting rows does not fail");
    }
    let (last, open_quote) = splitter.finish();
    rows.extend(last);
    Split { rows, open_quote }
}

/// The session's reading of the rows of one COPY FROM (its `take_row`): a header line is
/// skipped, nothing after the end marker `\.` is read, every other row is placed.
struct RowReader {
    header: Header,
    header_seen: bool,
    ended: bool,
    line: u64,
}

impl RowReader {
    fn new(header: Header) -> RowReader {
        RowReader {
            header,
            header_seen: false,
            ended: false,
            line: 0,
        }
    }

    fn take(&mut self, row: &[u8], router: &RowRouter) -> Result<(), copy::CopyError> {
        self.line += 1;
        if self.ended {
            return Ok(());
        }
        if self.header != Header::None && !self.header_seen {
            self.header_seen = true;
            return Ok(());
        }
        if copy::is_end_marker(row) {
            self.ended = true;
            return Ok(());
        }
        router.shard_of(row, self.line).map(|_| ())
    }
}
