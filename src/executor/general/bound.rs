//! A Bind on the general path: the extended-protocol messages the shards' DECLARE and the
//! combining statement are sent as, with the client's parameter values and the types the
//! combining step inferred for those the client left untyped.

use crate::protocol::Extended;
use crate::router::plan::PartialPlan;
use crate::router::route::{self as routing, BindParts};
use bytes::BytesMut;

/// Parse, Bind and Execute of the shards' DECLARE with the parameters it uses: their values
/// from the client's Bind, their types as the combining step inferred them.
pub(super) fn declare_messages(
    declare: &str,
    partial: &PartialPlan,
    param_oids: &[u32],
    rest: &[u8],
) -> Result<BytesMut, String> {
    let values = routing::select_params(rest, &partial.params).map_err(|e| e.to_string())?;
    // The DECLARE returns no rows: no result formats.
    let result_formats = BindParts::read(rest)
        .map_err(|e| e.to_string())?
        .result_formats
        .len();
    let mut values = values[..values.len() - result_formats].to_vec();
    values.extend_from_slice(&0i16.to_be_bytes());
    let mut types = Vec::with_capacity(2 + 4 * partial.params.len());
    types.extend_from_slice(&(partial.params.len() as i16).to_be_bytes());
    for i in 0..partial.params.len() {
        types.extend_from_slice(&param_oids.get(i).copied().unwrap_or(0).to_be_bytes());
    }
    let mut out = BytesMut::new();
    Extended::new(&mut out)
        .parse(b"", declare.as_bytes(), &types)
        .bind(b"", &values)
        .execute()
        .sync();
    Ok(out)
}

/// Parse's parameter types of the combining statement: the client's, and where it declared
/// none, the type the partial statement's use of it gave — a parameter only the shards use is
/// not in the combining statement, which must still take the client's whole Bind.
pub(super) fn combining_param_types(
    client_types: &[u8],
    rest: &[u8],
    partial: &PartialPlan,
    param_oids: &[u32],
) -> Vec<u8> {
    let count = BindParts::read(rest).map_or(0, |p| p.values.len());
    let all: Vec<usize> = (0..count).collect();
    let declared = routing::select_param_types(client_types, &all);
    let mut out = Vec::with_capacity(2 + 4 * count);
    out.extend_from_slice(&(count as i16).to_be_bytes());
    for i in 0..count {
        let at = 2 + 4 * i;
        let mut oid = declared
            .get(at..at + 4)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        if oid == 0 {
            if let Some(k) = partial.params.iter().position(|&p| p == i) {
                oid = param_oids.get(k).copied().unwrap_or(0);
            }
        }
        out.extend_from_slice(&oid.to_be_bytes());
    }
    out
}

/// Parse, Bind (the client's), Describe portal, Execute and Sync of the combining statement.
pub(super) fn combining_messages(sql: &str, param_types: &[u8], rest: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    Extended::new(&mut out)
        .parse(b"", sql.as_bytes(), param_types)
        .bind(b"", rest)
        .describe_portal()
        .execute()
        .sync();
    out
}
