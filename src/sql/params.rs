//! Bind parameters in SQL text the proxy rewrites.

/// `sql` with its parameters numbered `$1`, `$2`, … in order of first appearance. Found by
/// PostgreSQL's scanner, so a `$1` inside a string or comment is left alone.
pub fn renumber(sql: &str) -> Result<(String, Vec<usize>), String> {
    let tokens = pg_query::scan_tokens(sql).map_err(|e| e.to_string())?;
    let mut params: Vec<usize> = Vec::new();
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for t in tokens
        .iter()
        .filter(|t| t.token == pg_query::protobuf::Token::Param as i32)
    {
        let (start, end) = (t.start as usize, t.end as usize);
        let number: usize = sql
            .get(start + 1..end)
            .and_then(|n| n.parse().ok())
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("unexpected parameter {:?}", sql.get(start..end)))?;
        let new = match params.iter().position(|&p| p == number - 1) {
            Some(i) => i + 1,
            None => {
                params.push(number - 1);
                params.len()
            }
        };
        out.push_str(&sql[at..start]);
        out.push('$');
        out.push_str(&new.to_string());
        at = end;
    }
    out.push_str(&sql[at..]);
    Ok((out, params))
}
