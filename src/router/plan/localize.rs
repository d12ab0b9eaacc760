//! One plan for every simple query that differs from the planned one in literals only where
//! the plan does not depend on them: the literals the routing reads become references to the
//! routed text's own.

use super::{sequence, Keys, Operand, Plan};
use std::sync::Arc;

impl Plan {
    /// Turns the constants at the offsets of `literals` (the plain literals of the planned
    /// text, in order) into references to the literals of whatever text is routed with the
    /// plan. Returns the indexes referenced: every other literal must be the same for the plan
    /// to serve another text (it may be built into the plan).
    pub fn localize(&mut self, literal_offsets: &[usize], text: &[u8]) -> Vec<usize> {
        let mut used = Vec::new();
        // Whether `nextval('<name>')` is a key sequence's call depends on the literal.
        let calls_sequences = sequence::mentions_sequence_function(text);
        let p = match self {
            // Where these go does not depend on any value.
            Plan::Anywhere
            | Plan::Fixed(_)
            | Plan::AnyOf(_)
            | Plan::Every(_)
            | Plan::Script
            | Plan::Refused(_)
                if !calls_sequences =>
            {
                return (0..literal_offsets.len()).collect()
            }
            // Unless what other shards run is built from the text, literals included.
            Plan::Utility(u) if u.elsewhere.is_none() && !calls_sequences => {
                return (0..literal_offsets.len()).collect()
            }
            Plan::Anywhere
            | Plan::Fixed(_)
            | Plan::AnyOf(_)
            | Plan::Every(_)
            | Plan::Utility(_)
            | Plan::Script
            | Plan::Refused(_)
            | Plan::Sequence(_) => return used,
            // The statements each shard runs are built from the text, values included.
            Plan::Copy(_) | Plan::Combine(_) | Plan::Explain(_) => return used,
            Plan::Sharded(p) => p,
        };
        if p.merge.shard_sql.is_some()
            || p.insert_select.is_some()
            || p.key_update.is_some()
            || p.combine.is_some()
        {
            // The rewritten text has the values in it.
            return used;
        }
        let p = Arc::make_mut(p);
        let tuples = match &mut p.keys {
            // Every shard whatever the values, unless LIMIT/OFFSET took some.
            Keys::Any if !p.merge.bounds_rows() && !calls_sequences => {
                return (0..literal_offsets.len()).collect()
            }
            Keys::Any => return used,
            // Pruning bounds are kept as the planned text gave them.
            Keys::Constrained(_) => return used,
            Keys::OneOf(t) | Keys::Rows(t) => t,
        };
        for op in tuples
            .iter_mut()
            .flat_map(|t| t.key.iter_mut().chain(t.set_key.iter_mut()))
        {
            let Operand::Located(Some(_), at) = *op else {
                continue;
            };
            let at = at.max(0) as usize;
            let found = literal_offsets
                .iter()
                .position(|&o| o == at)
                .map(|i| (i, false))
                .or_else(|| {
                    // `-5` is one constant to the parser, the minus sign and a literal to the
                    // scanner.
                    let after_minus = text.get(at).filter(|&&c| c == b'-').map(|_| {
                        at + 1
                            + text[at + 1..]
                                .iter()
                                .take_while(|c| c.is_ascii_whitespace())
                                .count()
                    })?;
                    literal_offsets
                        .iter()
                        .position(|&o| o == after_minus)
                        .map(|i| (i, true))
                });
            if let Some((index, negated)) = found {
                *op = Operand::Literal { index, negated };
                used.push(index);
            }
        }
        used
    }
}
