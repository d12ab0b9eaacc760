//! The second step of an INSERT … SELECT that cannot run on the shards as it is: the SELECT's
//! rows, grouped by the shard their key belongs to, sent to each shard as batches of a
//! parameterised multi-row INSERT (values as text parameters, which the server reads with the
//! target columns' input functions, as it would the SELECT's own output).

use bytes::{Bytes, BytesMut};

use crate::protocol::MessageBuilder;
use crate::router::plan::InsertSelect;

/// Parameters per statement at most (the protocol counts them in 16 bits).
const MAX_PARAMS: usize = 32_767;
/// Rows per INSERT at most, so one statement stays a reasonable size.
const MAX_ROWS: usize = 1000;

/// The messages that insert `rows` (DataRow frames in text format) on one shard: Parse, Bind,
/// Describe and Execute per batch, then Sync, so the shard's part commits (or fails) as one.
pub fn batches(job: &InsertSelect, rows: &[Bytes]) -> BytesMut {
    let width = job.insert_columns.len().max(1);
    let per_batch = (MAX_PARAMS / width).clamp(1, MAX_ROWS);
    let mut out = BytesMut::new();
    for batch in rows.chunks(per_batch) {
        let mut sql = job.insert_head.clone();
        sql.push_str("VALUES ");
        for (r, _) in batch.iter().enumerate() {
            if r > 0 {
                sql.push_str(", ");
            }
            sql.push('(');
            for c in 0..width {
                if c > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("${}", r * width + c + 1));
            }
            sql.push(')');
        }
        sql.push_str(&job.insert_tail);
        MessageBuilder::new(&mut out, b'P')
            .cstr(b"")
            .cstr(sql.as_bytes())
            .i16(0)
            .finish();
        let mut bind = BytesMut::new();
        let mut m = MessageBuilder::new(&mut bind, b'B');
        m.cstr(b"")
            .cstr(b"")
            .i16(0)
            .i16((batch.len() * width) as i16);
        for row in batch {
            let values = super::gather::values(row);
            for c in 0..width {
                match values.get(c).copied().flatten() {
                    Some(v) => {
                        m.i32(v.len() as i32).bytes(v);
                    }
                    None => {
                        m.i32(-1);
                    }
                }
            }
        }
        m.i16(0).finish();
        out.extend_from_slice(&bind);
        MessageBuilder::new(&mut out, b'D')
            .u8(b'P')
            .cstr(b"")
            .finish();
        MessageBuilder::new(&mut out, b'E')
            .cstr(b"")
            .i32(0)
            .finish();
    }
    MessageBuilder::new(&mut out, b'S').finish();
    out
}
