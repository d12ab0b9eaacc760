//! The rows of a cursor open on several shards, merged on demand: each shard's cursor is read a
//! batch at a time, and the rows leave in the ORDER BY every shard already applied (k-way, one
//! buffered batch per shard), with the statement's OFFSET and LIMIT counted as they pass. The
//! proxy holds at most a batch per shard, however many rows the cursor has.

use std::cmp::Ordering;
use std::collections::VecDeque;

use bytes::Bytes;

use super::frames::{columns, without_hidden_fields, without_hidden_values};
use super::order::RowOrder;
use crate::router::plan::Merge;

/// Where a merge of shards' cursors stands between the client's FETCHes.
pub struct Merging {
    merge: Merge,
    buffers: Vec<VecDeque<Bytes>>,
    /// The shard's cursor has no more rows beyond its buffer.
    exhausted: Vec<bool>,
    /// The first shard's RowDescription, and which shard sent it.
    description: Option<(Bytes, usize)>,
    /// Rows skipped for the OFFSET, and rows passed on (for the LIMIT).
    skipped: u64,
    passed: u64,
}

/// What [`Merging::take`] stopped at.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// As many rows as asked for.
    Done,
    /// Every shard's rows are out (or the LIMIT is reached).
    End,
    /// These shards' buffers ran dry: fetch from them, then take again.
    NeedRows(Vec<usize>),
}

impl Merging {
    pub fn new(merge: Merge, shards: usize) -> Merging {
        Merging {
            merge,
            buffers: vec![VecDeque::new(); shards],
            exhausted: vec![false; shards],
            description: None,
            skipped: 0,
            passed: 0,
        }
    }

    /// The shards whose buffers must be filled before a row can be chosen.
    pub fn dry(&self) -> Vec<usize> {
        (0..self.buffers.len())
            .filter(|&i| self.buffers[i].is_empty() && !self.exhausted[i])
            .collect()
    }

    /// A batch from shard `i`'s cursor; `last`: fewer rows came than were asked for.
    pub fn fill(
        &mut self,
        i: usize,
        description: Option<Bytes>,
        rows: VecDeque<Bytes>,
        last: bool,
    ) {
        if self.description.is_none() {
            self.description = description.map(|d| (d, i));
        }
        self.buffers[i].extend(rows);
        self.exhausted[i] = last;
    }

    /// The shard RowDescription the order was read from, for the collation check.
    pub fn shard_description(&self) -> Option<(&Bytes, usize)> {
        self.description.as_ref().map(|(d, i)| (d, *i))
    }

    /// The client's RowDescription (the hidden sort columns taken off).
    pub fn description(&self) -> Option<Bytes> {
        let (d, _) = self.description.as_ref()?;
        Some(match self.merge.hidden {
            0 => d.clone(),
            hidden => without_hidden_fields(d, hidden),
        })
    }

    pub fn merge(&self) -> &Merge {
        &self.merge
    }

    /// Passes up to `n` rows (`None`: all) to `emit`, counting them into `taken`.
    pub fn take(
        &mut self,
        n: Option<u64>,
        taken: &mut u64,
        emit: &mut dyn FnMut(Bytes),
    ) -> Result<Progress, String> {
        let order = match (&self.description, self.merge.order.is_empty()) {
            (Some((d, _)), false) => Some(RowOrder::new(&self.merge.order, &columns(d))?),
            _ => None,
        };
        loop {
            if n.is_some_and(|n| *taken >= n) {
                return Ok(Progress::Done);
            }
            if self.merge.limit.is_some_and(|l| self.passed >= l) {
                return Ok(Progress::End);
            }
            let dry = self.dry();
            if !dry.is_empty() {
                return Ok(Progress::NeedRows(dry));
            }
            let mut least: Option<usize> = None;
            for (i, buffer) in self.buffers.iter().enumerate() {
                let Some(row) = buffer.front() else { continue };
                least = match (least, &order) {
                    (None, _) => Some(i),
                    (Some(l), Some(order)) => {
                        let current = self.buffers[l].front().map_or(&[][..], |r| &r[..]);
                        // Ties keep shard order.
                        match order.compare(row, current)? {
                            Ordering::Less => Some(i),
                            _ => Some(l),
                        }
                    }
                    (Some(l), None) => Some(l),
                };
            }
            let Some(i) = least else {
                return Ok(Progress::End);
            };
            let Some(row) = self.buffers[i].pop_front() else {
                continue;
            };
            if self.skipped < self.merge.offset {
                self.skipped += 1;
                continue;
            }
            self.passed += 1;
            *taken += 1;
            emit(match self.merge.hidden {
                0 => row,
                hidden => without_hidden_values(&row, hidden),
            });
        }
    }
}
