//! WITH clauses: queries of every kind the outermost query (and its subqueries) may name, and
//! recursive ones over a small range — counting, building text, stepping through a sharded
//! table's keys, or joining a sharded table in the recursive term.

use crate::expr::Col;
use crate::from::{int_col, out_cols};
use crate::query::{Cte, Gen, Req};
use crate::schema::{int_lit, lit, Dom, NumClass, Ty};

impl Gen {
    pub fn with_clause(&mut self) -> String {
        let n = if self.rng.chance(70) { 1 } else { 2 };
        let mut parts = Vec::new();
        let mut recursive = false;
        for _ in 0..n {
            let name = format!("w{}", self.ctes.len() + 1);
            if self.rng.chance(30) {
                recursive = true;
                let (sql, cols, rows) = self.recursive_cte(&name);
                parts.push(sql);
                self.ctes.push(Cte { name, cols, rows });
                continue;
            }
            let req = Req {
                max_cols: 3,
                limit: true,
                ..Req::default()
            };
            let s = self.select(&req, &[], 1.0);
            let mat = *self
                .rng
                .pick(&["", "", "", " MATERIALIZED", " NOT MATERIALIZED"]);
            parts.push(format!("{name} AS{mat} ({})", s.sql));
            let cols = out_cols(&s.cols);
            self.ctes.push(Cte {
                name,
                cols,
                rows: s.rows,
            });
        }
        format!(
            "WITH {}{} ",
            if recursive { "RECURSIVE " } else { "" },
            parts.join(", ")
        )
    }

    /// A recursive WITH query over a small range: counting, building text, stepping through
    /// a sharded table's keys, or joining a sharded table in its recursive term.
    fn recursive_cte(&mut self, name: &str) -> (String, Vec<Col>, f64) {
        let union = if self.rng.chance(70) {
            "UNION ALL"
        } else {
            "UNION"
        };
        let dom = *self
            .rng
            .pick(&[Dom::Cust, Dom::Product, Dom::Tiny, Dom::Order, Dom::Acct]);
        let start = int_lit(&mut self.rng, dom).max(0);
        let len = self.rng.range(1, 12);
        match self.rng.below(4) {
            0 => (
                format!(
                    "{name}(n) AS (SELECT {start} {union} SELECT n + 1 FROM {name} \
                     WHERE n < {})",
                    start + len
                ),
                vec![int_col("n", dom)],
                len as f64,
            ),
            1 => {
                let word = lit(&mut self.rng, Ty::Text, NumClass::Canon, Dom::Word);
                let mut s = int_col("s", Dom::Word);
                s.ty = Ty::Text;
                (
                    format!(
                        "{name}(n, s) AS (SELECT {start}, {word}::text {union} \
                         SELECT n + 1, s || '.' FROM {name} WHERE n < {})",
                        start + len
                    ),
                    vec![int_col("n", dom), s],
                    len as f64,
                )
            }
            2 => {
                let (table, key, dom) = *self.rng.pick(&[
                    ("df_customers", "cust_id", Dom::Cust),
                    ("df_accounts", "acct_id", Dom::Acct),
                    ("qf_items", "item_id", Dom::Item),
                ]);
                let (a, b) = (int_lit(&mut self.rng, dom), int_lit(&mut self.rng, dom));
                let step = self.rng.range(1, 40);
                let stop = a.max(b) + self.rng.range(0, 200);
                (
                    format!(
                        "{name}(n) AS (SELECT x.{key} FROM {table} x WHERE x.{key} IN ({a}, {b}) \
                         {union} SELECT n + {step} FROM {name} WHERE n < {stop})"
                    ),
                    vec![int_col("n", dom)],
                    20.0,
                )
            }
            _ => {
                let start = self.rng.range(1, 480);
                (
                    format!(
                        "{name}(n, depth) AS (SELECT {start}::bigint, 0 {union} \
                         SELECT c.cust_id, {name}.depth + 1 FROM {name} \
                         JOIN df_customers c ON c.cust_id = {name}.n + 1 \
                         WHERE {name}.depth < {len})"
                    ),
                    vec![int_col("n", Dom::Cust), int_col("depth", Dom::Tiny)],
                    len as f64,
                )
            }
        }
    }
}
