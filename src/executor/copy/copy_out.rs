//! COPY … TO STDOUT gathered from every shard holding the table, over the session's
//! connections ([`Host`]).

use super::copy_in::CopyJob;
use super::shards::tag_count;
use super::{CopyFormat, Header};
use crate::backend::BackendError;
use crate::executor::gather::{Sink, StreamError};
use crate::executor::host::Host;
use crate::protocol::{self, MessageBuilder, TxStatus};
use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

/// The binary format's trailer, a field count of -1.
const BINARY_TRAILER: [u8; 2] = [0xff, 0xff];

/// What of a shard's CopyData the client gets: all of it, less a header every shard writes
/// (the first shard's is the client's) and the binary format's trailer (the client gets one,
/// at the end). PostgreSQL sends each binary tuple, and the trailer, as a CopyData of its own,
/// the header together with the first of them.
fn client_part<'d>(
    data: &'d [u8],
    format: &CopyFormat,
    later_shard: bool,
    first: bool,
) -> &'d [u8] {
    if !format.binary {
        // A header line is the first CopyData of each shard.
        let repeated_header = later_shard && first && format.header != Header::None;
        return if repeated_header { &[] } else { data };
    }
    if !first {
        return if data == BINARY_TRAILER { &[] } else { data };
    }
    let extension = data.get(15..19).map_or(0, |b| {
        i32::from_be_bytes([b[0], b[1], b[2], b[3]]).max(0) as usize
    });
    let header_len = (19 + extension).min(data.len());
    let (header, rest) = data.split_at(header_len);
    let rest = if rest == BINARY_TRAILER {
        &[][..]
    } else {
        rest
    };
    if later_shard {
        rest
    } else if rest.is_empty() {
        header
    } else {
        data
    }
}

/// COPY … TO STDOUT from every shard holding the table: one CopyOutResponse, the shards'
/// rows one shard after the other (a CSV header once; the binary format's header and trailer
/// once), one CopyDone, the counts added up; streamed to the client. Whether it failed.
pub async fn run<H: Host>(host: &mut H, job: &CopyJob) -> Result<bool, H::Error> {
    let format = CopyFormat::from_options(&job.plan.options).unwrap_or_else(|_| CopyFormat::text());
    host.join(&job.shards).await?;
    let (links, mut sink) = host.links_and_sink();
    let mut query = BytesMut::new();
    protocol::query(&mut query, &job.sql);
    // Every shard starts at once; each waits on its socket until its turn to be read.
    for &shard in &job.shards {
        if let Some(p) = links.parked.get_mut(shard) {
            // A simple query drops the backend's unnamed statement.
            p.conn.conn.unnamed = None;
            if let Err(e) = p.conn.conn.stream.write_all(&query).await {
                p.conn.conn.broken = true;
                return Err(BackendError::Io(e).into());
            }
        }
    }
    let mut total = 0u64;
    let mut error: Option<Bytes> = None;
    let mut started = false;
    // A binary header waiting to go out with the next CopyData.
    let mut held = Vec::new();
    for (i, &shard) in job.shards.iter().enumerate() {
        let Some(p) = links.parked.get_mut(shard) else {
            continue;
        };
        let conn = &mut p.conn.conn;
        let mut first_row = true;
        loop {
            let f = conn.read_frame().await?;
            match f.tag {
                b'H' if !started && error.is_none() => {
                    sink.out().extend_from_slice(&f.raw);
                    started = true;
                }
                b'd' => {
                    let part = client_part(f.body(), &format, i > 0, first_row);
                    let header_alone = format.binary && i == 0 && first_row;
                    first_row = false;
                    if header_alone && part.len() < f.body().len() {
                        // Drivers read the header with the tuple (or trailer) after it, as
                        // PostgreSQL sends them: it waits for the next one.
                        held = part.to_vec();
                    } else if !part.is_empty() && error.is_none() {
                        if part.len() == f.body().len() && held.is_empty() {
                            sink.out().extend_from_slice(&f.raw);
                        } else {
                            MessageBuilder::new(sink.out(), b'd')
                                .bytes(&std::mem::take(&mut held))
                                .bytes(part)
                                .finish();
                        }
                        if let Err(e) = sink.written().await {
                            conn.broken = true;
                            return Err(StreamError::Client(e).into());
                        }
                    }
                }
                b'C' => total += tag_count(f.body()),
                b'E' => {
                    error.get_or_insert(f.raw);
                }
                b'N' => sink.out().extend_from_slice(&f.raw),
                b'S' => conn.note_parameter_status(f.body()),
                b'Z' => {
                    p.tx_status = TxStatus::of_ready(f.body());
                    break;
                }
                _ => {}
            }
        }
    }
    let failed = error.is_some();
    let out = sink.out();
    match error {
        Some(e) => out.extend_from_slice(&e),
        None => {
            if started {
                if format.binary {
                    MessageBuilder::new(out, b'd')
                        .bytes(&held)
                        .bytes(&BINARY_TRAILER)
                        .finish();
                }
                MessageBuilder::new(out, b'c').finish();
            }
            protocol::command_complete(out, &format!("COPY {total}"));
        }
    }
    Ok(failed)
}
