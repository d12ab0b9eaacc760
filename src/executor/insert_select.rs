//! The second step of an INSERT … SELECT that cannot run on the shards as it is: the SELECT's
//! rows, grouped by the shard their key belongs to, sent to each shard as batches of a
//! parameterised multi-row INSERT (values as text parameters, which the server reads with the
//! target columns' input functions, as it would the SELECT's own output).

use crate::protocol::{Extended, NO_PARAM_TYPES};
use bytes::BufMut;
use bytes::{Bytes, BytesMut};

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
        // No parameter formats (all text), the values, no result formats.
        let mut bind = BytesMut::new();
        bind.put_i16(0);
        bind.put_i16((batch.len() * width) as i16);
        for row in batch {
            let values = super::gather::values(row);
            for c in 0..width {
                match values.get(c).copied().flatten() {
                    Some(v) => {
                        bind.put_i32(v.len() as i32);
                        bind.extend_from_slice(v);
                    }
                    None => bind.put_i32(-1),
                }
            }
        }
        bind.put_i16(0);
        Extended::new(&mut out)
            .parse(b"", sql.as_bytes(), NO_PARAM_TYPES)
            .bind(b"", &bind)
            .describe_portal()
            .execute();
    }
    Extended::new(&mut out).sync();
    out
}
