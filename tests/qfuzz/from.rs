//! FROM clauses: tables (sharded, duplicated, unsharded), subqueries, VALUES lists,
//! generate_series, WITH queries and LATERAL subqueries, joined inner, LEFT, RIGHT, FULL, CROSS
//! or by commas, nested `(a JOIN b ON …)` on the right of another join, each join's row count
//! estimated so that none makes more than [`BUDGET`] rows.

use crate::expr::{default_dom, Col, Cx, Env, Ex, Rel};
use crate::query::{Gen, OutCol, Req, MAX_DEPTH};
use crate::schema::{int_lit, lit, Dom, NumClass, Ty, TABLES};

/// The most rows a FROM clause may make (estimated).
pub const BUDGET: f64 = 20_000.0;

/// A FROM item or a whole FROM clause.
pub struct Item {
    pub sql: String,
    pub rels: Vec<Rel>,
    pub rows: f64,
    /// Conditions of comma joins, for the WHERE clause.
    pub conds: Vec<String>,
}

impl Gen {
    // FROM

    pub fn build_from(&mut self, outer: &[Rel]) -> Item {
        let n = if self.simple {
            1 + self.rng.below(2)
        } else {
            1 + self.rng.weighted(&[34, 36, 20, 10])
        };
        let first = self.pick_item(1.0);
        let mut sql = first.sql;
        let mut rels = first.rels;
        let mut rows = first.rows;
        // ON conditions see only the relations since the last comma.
        let mut group_start = 0;
        let mut where_conds: Vec<String> = Vec::new();
        for _ in 1..n {
            let lateral_ok = self.depth < MAX_DEPTH && rows < BUDGET / 20.0 && !self.simple;
            let kind = if self.simple {
                self.rng.weighted(&[40, 30, 15, 15])
            } else {
                self.rng
                    .weighted(&[26, 24, 10, 10, 7, 6, if lateral_ok { 12 } else { 0 }])
            };
            if kind == 6 {
                let (join, new_group, lat) = self.lateral(&rels, rows, outer);
                sql.push_str(&join);
                if new_group {
                    group_start = rels.len();
                }
                rows = lat.rows;
                rels.extend(lat.rels);
                continue;
            }
            let mut item = if self.depth < MAX_DEPTH && !self.simple && self.rng.chance(10) {
                self.nested_join()
            } else {
                self.pick_item(rows)
            };
            let full = kind == 3;
            let mut cond = self.join_cond(&rels[group_start..], &item.rels, full);
            let mut est = join_rows(kind, rows, item.rows, cond.1);
            for _ in 0..3 {
                if est <= BUDGET {
                    break;
                }
                item = self.small_item();
                cond = self.join_cond(&rels[group_start..], &item.rels, full);
                est = join_rows(kind, rows, item.rows, cond.1);
            }
            if est > BUDGET {
                // A single row adds no rows.
                item = self.values_rows(1);
                cond = ("true".into(), 1.0);
                est = rows;
            }
            match kind {
                4 => sql.push_str(&format!(" CROSS JOIN {}", item.sql)),
                5 => {
                    sql.push_str(&format!(", {}", item.sql));
                    group_start = rels.len();
                    if cond.0 != "true" && self.rng.chance(75) {
                        where_conds.push(cond.0.clone());
                        est = rows * item.rows * cond.1;
                    }
                }
                _ => {
                    let jt = match kind {
                        0 => *self.rng.pick(&["JOIN", "INNER JOIN"]),
                        1 => *self.rng.pick(&["LEFT JOIN", "LEFT OUTER JOIN"]),
                        2 => *self.rng.pick(&["RIGHT JOIN", "RIGHT OUTER JOIN"]),
                        _ => *self.rng.pick(&["FULL JOIN", "FULL OUTER JOIN"]),
                    };
                    sql.push_str(&format!(" {jt} {} ON {}", item.sql, cond.0));
                }
            }
            rows = est.max(1.0);
            rels.extend(item.rels);
        }
        Item {
            sql,
            rels,
            rows,
            conds: where_conds,
        }
    }

    /// A table, subquery, VALUES list, generate_series or WITH query, aliased.
    fn pick_item(&mut self, left_rows: f64) -> Item {
        if self.simple {
            return self.table_item(left_rows);
        }
        let sub_ok = self.depth < MAX_DEPTH;
        let w = [
            60,
            if sub_ok { 11 } else { 0 },
            7,
            6,
            if self.ctes.is_empty() { 0 } else { 16 },
        ];
        match self.rng.weighted(&w) {
            0 => self.table_item(left_rows),
            1 => {
                let req = Req {
                    max_cols: 4,
                    limit: true,
                    ..Req::default()
                };
                let s = self.select(&req, &[], 1.0);
                let alias = self.alias();
                let mut cols = out_cols(&s.cols);
                let named = if self.rng.chance(20) {
                    for (i, c) in cols.iter_mut().enumerate() {
                        c.name = format!("a{i}");
                    }
                    let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
                    format!("({})", names.join(", "))
                } else {
                    String::new()
                };
                Item {
                    sql: format!("({}) AS {alias}{named}", s.sql),
                    rels: vec![Rel { alias, cols }],
                    rows: s.rows,
                    conds: Vec::new(),
                }
            }
            2 => self.values_item(),
            3 => self.series_item(),
            _ => {
                let i = self.rng.below(self.ctes.len());
                let (name, cols, rows) = {
                    let c = &self.ctes[i];
                    (c.name.clone(), c.cols.clone(), c.rows)
                };
                let alias = self.alias();
                Item {
                    sql: format!("{name} AS {alias}"),
                    rels: vec![Rel { alias, cols }],
                    rows,
                    conds: Vec::new(),
                }
            }
        }
    }

    /// A base table; small ones more often when the join so far has many rows.
    fn table_item(&mut self, left_rows: f64) -> Item {
        let weights: Vec<u32> = TABLES
            .iter()
            .map(|t| {
                if left_rows > 400.0 && t.rows > 100.0 {
                    t.weight / 3
                } else {
                    t.weight
                }
            })
            .collect();
        let t = &TABLES[self.rng.weighted(&weights)];
        let (sql, alias) = if !self.bare.contains(&t.name) && self.rng.chance(8) {
            self.bare.push(t.name);
            (t.name.to_string(), t.name.to_string())
        } else {
            let a = self.alias();
            let kw = if self.rng.chance(50) { " AS " } else { " " };
            (format!("{}{kw}{a}", t.name), a)
        };
        let cols = t
            .cols
            .iter()
            .map(|c| Col {
                name: c.name.into(),
                ty: c.ty,
                num: c.num,
                dom: c.dom,
                ndv: c.ndv,
                key: c.key,
                huge: c.huge,
            })
            .collect();
        Item {
            sql,
            rels: vec![Rel { alias, cols }],
            rows: t.rows,
            conds: Vec::new(),
        }
    }

    /// A relation of few rows: a small table, VALUES, generate_series.
    fn small_item(&mut self) -> Item {
        match self.rng.below(3) {
            0 => self.table_item(1e9),
            1 => self.values_item(),
            _ => self.series_item(),
        }
    }

    fn values_item(&mut self) -> Item {
        let nrows = 1 + self.rng.below(6);
        self.values_rows(nrows)
    }

    /// A VALUES list of `nrows` rows.
    fn values_rows(&mut self, nrows: usize) -> Item {
        let ncols = 1 + self.rng.below(3);
        let kinds: Vec<(Ty, NumClass, Dom)> = (0..ncols)
            .map(|_| {
                *self.rng.pick(&[
                    (Ty::Int, NumClass::Fixed(0), Dom::Cust),
                    (Ty::Int, NumClass::Fixed(0), Dom::Product),
                    (Ty::Int, NumClass::Fixed(0), Dom::Code),
                    (Ty::Int, NumClass::Fixed(0), Dom::Tiny),
                    (Ty::Int, NumClass::Fixed(0), Dom::Region),
                    (Ty::Int, NumClass::Fixed(0), Dom::Acct),
                    (Ty::Text, NumClass::Fixed(0), Dom::Word),
                    (Ty::Num, NumClass::Fixed(2), Dom::Money),
                    (Ty::Bool, NumClass::Fixed(0), Dom::Flag),
                    (Ty::Date, NumClass::Fixed(0), Dom::Day),
                ])
            })
            .collect();
        let mut tuples = Vec::new();
        for r in 0..nrows {
            let vals: Vec<String> = kinds
                .iter()
                .map(|(ty, num, dom)| {
                    if r > 0 && self.rng.chance(15) {
                        "NULL".into()
                    } else {
                        lit(&mut self.rng, *ty, *num, *dom)
                    }
                })
                .collect();
            tuples.push(format!("({})", vals.join(", ")));
        }
        let alias = self.alias();
        let cols: Vec<Col> = kinds
            .iter()
            .enumerate()
            .map(|(i, (ty, num, dom))| Col {
                name: format!("c{i}"),
                ty: *ty,
                num: *num,
                dom: *dom,
                ndv: nrows as u32,
                key: false,
                huge: false,
            })
            .collect();
        let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
        Item {
            sql: format!(
                "(VALUES {}) AS {alias}({})",
                tuples.join(", "),
                names.join(", ")
            ),
            rels: vec![Rel { alias, cols }],
            rows: nrows as f64,
            conds: Vec::new(),
        }
    }

    fn series_item(&mut self) -> Item {
        let dom = *self.rng.pick(&[
            Dom::Cust,
            Dom::Product,
            Dom::Tiny,
            Dom::Code,
            Dom::Order,
            Dom::Item,
        ]);
        let a = int_lit(&mut self.rng, dom).max(0);
        let len = self.rng.range(0, 25);
        let alias = self.alias();
        let sql = if self.rng.chance(25) {
            let step = self.rng.range(2, 5);
            format!(
                "generate_series({a}, {}, {step}) AS {alias}(n)",
                a + len * step
            )
        } else {
            format!("generate_series({a}, {}) AS {alias}(n)", a + len)
        };
        let mut c = int_col("n", dom);
        c.ndv = len as u32 + 1;
        Item {
            sql,
            rels: vec![Rel {
                alias,
                cols: vec![c],
            }],
            rows: len as f64 + 1.0,
            conds: Vec::new(),
        }
    }

    /// `(a JOIN b ON …)`, to stand on the right of another join.
    fn nested_join(&mut self) -> Item {
        let a = self.pick_item(1.0);
        let b = self.small_or_table();
        let kind = self.rng.below(4);
        let (cond, sel) = self.join_cond(&a.rels, &b.rels, kind == 3);
        let jt = ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"][kind];
        let rows = join_rows(kind, a.rows, b.rows, sel);
        let mut rels = a.rels;
        rels.extend(b.rels);
        Item {
            sql: format!("({} {jt} {} ON {cond})", a.sql, b.sql),
            rels,
            rows,
            conds: Vec::new(),
        }
    }

    fn small_or_table(&mut self) -> Item {
        if self.rng.chance(60) {
            self.table_item(1.0)
        } else {
            self.small_item()
        }
    }

    /// A LATERAL subquery (or generate_series over a column) joined to the relations so far
    /// (which it may name): the join's SQL, whether it starts a new comma group, and the new
    /// relation with the rows of the whole join.
    fn lateral(&mut self, left: &[Rel], left_rows: f64, outer: &[Rel]) -> (String, bool, Item) {
        let tiny: Vec<Ex> = left
            .iter()
            .flat_map(|r| {
                r.cols
                    .iter()
                    .filter(|c| c.ty == Ty::Int && c.dom == Dom::Tiny)
                    .map(move |c| r.ex(c))
            })
            .collect();
        let alias = self.alias();
        let (sql, cols, mut rows) = if !tiny.is_empty() && self.rng.chance(20) {
            let c = self.rng.pick(&tiny).clone();
            (
                format!(
                    "generate_series(1, LEAST(COALESCE({}, 2), 9)::int) AS {alias}(n)",
                    c.sql
                ),
                vec![int_col("n", Dom::Tiny)],
                left_rows * 4.0,
            )
        } else {
            let mut scope: Vec<Rel> = left.to_vec();
            scope.extend(outer.iter().cloned());
            let req = Req {
                max_cols: 3,
                limit: true,
                ..Req::default()
            };
            let s = self.select(&req, &scope, left_rows);
            (
                format!("({}) AS {alias}", s.sql),
                out_cols(&s.cols),
                left_rows * s.rows.max(1.0),
            )
        };
        let (sql, cols) = if rows > BUDGET {
            // Too many rows: one row per left row instead.
            let all: Vec<Ex> = left
                .iter()
                .flat_map(|r| r.cols.iter().map(move |c| r.ex(c)))
                .filter(|e| e.ty != Ty::Arr)
                .collect();
            let c = self.rng.pick(&all).clone();
            rows = left_rows;
            let mut col = out_cols(&[OutCol {
                name: "c0".into(),
                ex: c.clone(),
            }]);
            col[0].name = "c0".into();
            (format!("(SELECT {} AS c0) AS {alias}", c.sql), col)
        } else {
            (sql, cols)
        };
        let rel = Rel { alias, cols };
        let (join, new_group) = match self.rng.below(4) {
            0 => (format!(" CROSS JOIN LATERAL {sql}"), false),
            1 => (format!(" JOIN LATERAL {sql} ON true"), false),
            2 => {
                let cond = if self.rng.chance(50) {
                    "true".to_string()
                } else {
                    let env = Env {
                        local: vec![rel.clone()],
                        ..Env::default()
                    };
                    self.pred(&Cx::row(&env, false), 1)
                };
                (format!(" LEFT JOIN LATERAL {sql} ON {cond}"), false)
            }
            _ => (format!(", LATERAL {sql}"), true),
        };
        let item = Item {
            sql: String::new(),
            rels: vec![rel],
            rows,
            conds: Vec::new(),
        };
        (join, new_group, item)
    }

    /// An ON condition between the relations so far and a new one, and its selectivity:
    /// mostly an equality of columns of one domain, sometimes with more conditions. A FULL
    /// join's is `true` or has an equality among its top-level ANDs (PostgreSQL runs a FULL
    /// join only as a merge or hash join).
    fn join_cond(&mut self, left: &[Rel], right: &[Rel], full: bool) -> (String, f64) {
        let mut pairs = Vec::new();
        let mut loose = Vec::new();
        for l in left {
            for lc in &l.cols {
                for r in right {
                    for rc in &r.cols {
                        if lc.ty != rc.ty || matches!(lc.ty, Ty::Bool | Ty::Arr) {
                            continue;
                        }
                        let pair = (l.ex(lc), r.ex(rc));
                        if lc.dom == rc.dom && joinable(lc.dom) {
                            pairs.push(pair);
                        } else {
                            loose.push(pair);
                        }
                    }
                }
            }
        }
        let (mut cond, mut sel) = if !pairs.is_empty() && self.rng.chance(88) {
            let (a, b) = self.rng.pick(&pairs).clone();
            let mut cond = if self.rng.chance(50) {
                format!("{} = {}", a.sql, b.sql)
            } else {
                format!("{} = {}", b.sql, a.sql)
            };
            let mut sel = 1.0 / a.ndv.min(b.ndv).max(1) as f64;
            if pairs.len() > 1 && self.rng.chance(12) {
                let (c, d) = self.rng.pick(&pairs).clone();
                cond = format!("{cond} AND {} = {}", c.sql, d.sql);
                sel *= 0.5;
            }
            (cond, sel)
        } else if !loose.is_empty() && self.rng.chance(60) {
            let (a, b) = self.rng.pick(&loose).clone();
            let op = if full {
                "="
            } else {
                *self.rng.pick(&["=", "=", "=", "<", ">="])
            };
            let sel = if op == "=" {
                1.0 / a.ndv.min(b.ndv).max(1) as f64
            } else {
                0.5
            };
            (format!("{} {op} {}", a.sql, b.sql), sel)
        } else {
            ("true".to_string(), 1.0)
        };
        if !self.simple && self.rng.chance(25) && !(full && cond == "true") {
            let env = Env {
                local: right.to_vec(),
                ..Env::default()
            };
            let sub = !full && self.rng.chance(10);
            let p = self.pred(&Cx::row(&env, sub), 1);
            cond = format!("{cond} AND {p}");
            sel *= 0.5;
        }
        if !full && !self.simple && self.rng.chance(8) {
            let env = Env {
                local: left.to_vec(),
                ..Env::default()
            };
            let p = self.pred(&Cx::row(&env, false), 0);
            cond = format!("({cond} OR {p})");
            sel = (sel + 0.3).min(1.0);
        }
        (cond, sel)
    }
}

/// Rows of a join of `l` and `r` rows with selectivity `sel` (kinds as in `build_from`:
/// inner, left, right, full, cross, comma).
pub fn join_rows(kind: usize, l: f64, r: f64, sel: f64) -> f64 {
    let inner = l * r * sel;
    match kind {
        0 => inner,
        1 => inner.max(l),
        2 => inner.max(r),
        3 => inner + l + r,
        _ => l * r,
    }
}

pub fn joinable(dom: Dom) -> bool {
    !matches!(dom, Dom::Flag | Dom::Instant | Dom::Frac | Dom::Money)
}

pub fn int_col(name: &str, dom: Dom) -> Col {
    Col {
        name: name.into(),
        ty: Ty::Int,
        num: NumClass::Fixed(0),
        dom,
        ndv: 12,
        key: false,
        huge: false,
    }
}

/// The columns a subquery's output gives the relation made of it.
pub fn out_cols(cols: &[OutCol]) -> Vec<Col> {
    cols.iter()
        .map(|c| Col {
            name: c.name.clone(),
            ty: c.ex.ty,
            num: c.ex.num,
            dom: if c.ex.ty == Ty::Int || c.ex.ty == Ty::Text {
                c.ex.dom
            } else {
                default_dom(c.ex.ty)
            },
            ndv: c.ex.ndv,
            key: false,
            huge: c.ex.huge,
        })
        .collect()
}
