//! COPY … TO STDOUT gathered from every shard holding the table.

use super::super::host::ClientSink;
use crate::backend::BackendError;
use crate::executor::copy::copy_in::CopyJob;
use crate::executor::copy::shards::tag_count;
use crate::executor::copy::{CopyFormat, Header};
use crate::executor::gather;
use crate::frontend::session::{Session, SessionError};
use crate::frontend::socket::ClientSocket;
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

impl Session {
    /// COPY … TO STDOUT from every shard holding the table: one CopyOutResponse, the shards'
    /// rows one shard after the other (a CSV header once; the binary format's header and
    /// trailer once), one CopyDone, the counts added up.
    pub(super) async fn copy_out(
        &mut self,
        job: CopyJob,
        extended: bool,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let format =
            CopyFormat::from_options(&job.plan.options).unwrap_or_else(|_| CopyFormat::text());
        for &shard in &job.shards {
            self.switch_to(shard).await?;
            self.drain_current().await?;
            self.park_current();
        }
        let mut query = BytesMut::new();
        protocol::query(&mut query, &job.sql);
        // Every shard starts at once; each waits on its socket until its turn to be read.
        for &shard in &job.shards {
            if let Some(p) = self.links.parked.get_mut(shard) {
                // A simple query drops the backend's unnamed statement.
                p.conn.conn.unnamed = None;
                if let Err(e) = p.conn.conn.stream.write_all(&query).await {
                    p.conn.conn.broken = true;
                    return Err(SessionError::Backend(BackendError::Io(e)));
                }
            }
        }
        let mut total = 0u64;
        let mut error: Option<Bytes> = None;
        let mut started = false;
        // A binary header waiting to go out with the next CopyData.
        let mut held = Vec::new();
        for (i, &shard) in job.shards.iter().enumerate() {
            let Some(p) = self.links.parked.get_mut(shard) else {
                continue;
            };
            let conn = &mut p.conn.conn;
            let mut first_row = true;
            loop {
                let f = conn.read_frame().await?;
                match f.tag {
                    b'H' if !started && error.is_none() => {
                        self.cout.extend_from_slice(&f.raw);
                        started = true;
                    }
                    b'd' => {
                        let part = client_part(f.body(), &format, i > 0, first_row);
                        let header_alone = format.binary && i == 0 && first_row;
                        first_row = false;
                        if header_alone && part.len() < f.body().len() {
                            // Drivers read the header with the tuple (or trailer) after it,
                            // as PostgreSQL sends them: it waits for the next one.
                            held = part.to_vec();
                        } else if !part.is_empty() && error.is_none() {
                            if part.len() == f.body().len() && held.is_empty() {
                                self.cout.extend_from_slice(&f.raw);
                            } else {
                                MessageBuilder::new(&mut self.cout, b'd')
                                    .bytes(&std::mem::take(&mut held))
                                    .bytes(part)
                                    .finish();
                            }
                            let mut sink = ClientSink {
                                cout: &mut self.cout,
                                client: Some(&mut *client),
                                eager: !self.under_way.script,
                            };
                            if let Err(e) = gather::Sink::written(&mut sink).await {
                                conn.broken = true;
                                return Err(SessionError::Client(e));
                            }
                        }
                    }
                    b'C' => total += tag_count(f.body()),
                    b'E' => {
                        error.get_or_insert(f.raw);
                    }
                    b'N' => self.cout.extend_from_slice(&f.raw),
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
        match error {
            Some(e) => self.cout.extend_from_slice(&e),
            None => {
                if started {
                    if format.binary {
                        MessageBuilder::new(&mut self.cout, b'd')
                            .bytes(&held)
                            .bytes(&BINARY_TRAILER)
                            .finish();
                    }
                    MessageBuilder::new(&mut self.cout, b'c').finish();
                }
                protocol::command_complete(&mut self.cout, &format!("COPY {total}"));
            }
        }
        self.end_copy(extended, failed);
        Ok(())
    }
}
