//! The combining step's connection: rows the shards returned in binary format loaded into a
//! temporary table with `COPY … FROM STDIN (FORMAT binary)`.
//!
//! A DataRow's body (a 16-bit column count, then each value as a 32-bit length and its bytes)
//! is exactly a tuple of PostgreSQL's binary COPY format, so a shard's binary row becomes a
//! CopyData message by its first byte alone.

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use crate::backend::{BackendConn, BackendError};
use crate::protocol;

/// The binary COPY header: signature, flags, header extension length.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// A COPY into the combining step's table, between its start and its end.
pub struct CopyIn<'c> {
    conn: &'c mut BackendConn,
    out: BytesMut,
    pub rows: u64,
}

/// What a statement on the combining connection answered, when it failed: its ErrorResponse.
pub type Refused = Bytes;

impl<'c> CopyIn<'c> {
    /// Starts `copy` (a `COPY … FROM STDIN (FORMAT binary)`) on `conn`.
    pub async fn start(
        conn: &'c mut BackendConn,
        copy: &str,
    ) -> Result<Result<CopyIn<'c>, Refused>, BackendError> {
        let mut msg = BytesMut::new();
        protocol::query(&mut msg, copy);
        conn.unnamed = None;
        conn.stream.write_all(&msg).await?;
        loop {
            let f = conn.read_frame().await?;
            match f.tag {
                b'G' => break,
                b'E' => {
                    let error = f.raw;
                    read_until_ready(conn).await?;
                    return Ok(Err(error));
                }
                b'S' => conn.note_parameter_status(f.body()),
                _ => {}
            }
        }
        let mut out = BytesMut::with_capacity(64 * 1024);
        copy_data(&mut out, HEADER);
        Ok(Ok(CopyIn { conn, out, rows: 0 }))
    }

    /// Adds shards' DataRow frames (binary format) to the table.
    pub async fn rows(&mut self, rows: impl IntoIterator<Item = &Bytes>) -> std::io::Result<()> {
        for row in rows {
            debug_assert_eq!(row.first(), Some(&b'D'), "a DataRow frame");
            let at = self.out.len();
            self.out.extend_from_slice(row);
            self.out[at] = b'd';
            self.rows += 1;
            if self.out.len() >= 256 * 1024 {
                self.conn.stream.write_all(&self.out).await?;
                self.out.clear();
            }
        }
        Ok(())
    }

    /// Ends the COPY: the trailer, CopyDone, and the answer up to ReadyForQuery.
    pub async fn finish(mut self) -> Result<Result<(), Refused>, BackendError> {
        copy_data(&mut self.out, &(-1i16).to_be_bytes());
        self.out.extend_from_slice(&[b'c', 0, 0, 0, 4]);
        self.conn.stream.write_all(&self.out).await?;
        Ok(match read_until_ready(self.conn).await? {
            Some(error) => Err(error),
            None => Ok(()),
        })
    }
}

fn copy_data(out: &mut BytesMut, data: &[u8]) {
    out.extend_from_slice(b"d");
    out.extend_from_slice(&((data.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(data);
}

/// Sends a simple query and reads its answer; its first ErrorResponse, if it failed.
pub async fn run(conn: &mut BackendConn, sql: &str) -> Result<Option<Refused>, BackendError> {
    let mut msg = BytesMut::new();
    protocol::query(&mut msg, sql);
    conn.unnamed = None;
    conn.stream.write_all(&msg).await?;
    read_until_ready(conn).await
}

async fn read_until_ready(conn: &mut BackendConn) -> Result<Option<Refused>, BackendError> {
    let mut error = None;
    loop {
        let f = conn.read_frame().await?;
        match f.tag {
            b'E' if error.is_none() => error = Some(f.raw),
            b'S' => conn.note_parameter_status(f.body()),
            b'Z' => return Ok(error),
            _ => {}
        }
    }
}
