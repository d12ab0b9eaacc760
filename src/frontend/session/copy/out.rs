//! COPY … TO STDOUT gathered from every shard holding the table.

use super::*;
use crate::executor::gather;

impl Session {
    /// COPY … TO STDOUT from every shard holding the table: one CopyOutResponse, the shards'
    /// rows one shard after the other (a CSV header once), one CopyDone, the counts added up.
    pub(super) async fn copy_out(
        &mut self,
        job: CopyJob,
        extended: bool,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let header = CopyFormat::from_options(&job.plan.options)
            .map(|f| f.header != Header::None)
            .unwrap_or(false);
        for &shard in &job.shards {
            self.switch_to(shard).await?;
            self.drain_current().await?;
            self.park_current();
        }
        let mut query = BytesMut::new();
        protocol::query(&mut query, &job.sql);
        // Every shard starts at once; each waits on its socket until its turn to be read.
        for &shard in &job.shards {
            if let Some(p) = self.parked_on(shard) {
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
        for (i, &shard) in job.shards.iter().enumerate() {
            let Some(p) = self.parked.get_mut(shard) else {
                continue;
            };
            let conn = &mut p.conn.conn;
            let mut first_row = true;
            loop {
                let f = match conn.read_frame().await {
                    Ok(f) => f,
                    Err(e) => {
                        conn.broken = true;
                        return Err(e.into());
                    }
                };
                match f.tag {
                    b'H' if !started && error.is_none() => {
                        self.cout.extend_from_slice(&f.raw);
                        started = true;
                    }
                    b'd' => {
                        // Each shard writes the header as its first CopyData.
                        let repeated_header = header && i > 0 && first_row;
                        first_row = false;
                        if !repeated_header && error.is_none() {
                            self.cout.extend_from_slice(&f.raw);
                            let mut sink = ClientSink {
                                cout: &mut self.cout,
                                client: &mut *client,
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
                        p.tx_status = f.body().first().copied().unwrap_or(b'I');
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
                    MessageBuilder::new(&mut self.cout, b'c').finish();
                }
                protocol::command_complete(&mut self.cout, &format!("COPY {total}"));
            }
        }
        self.end_copy(extended, failed);
        Ok(())
    }
}
