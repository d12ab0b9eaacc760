//! Queries: WITH (plain and recursive), set operations, selects in six shapes (plain, one
//! aggregate row, GROUP BY with grouping sets, window functions, DISTINCT, DISTINCT ON), FROM
//! clauses of joins of every kind over tables, subqueries, VALUES, generate_series, WITH
//! queries and LATERAL subqueries, ORDER BY / LIMIT / OFFSET where the order is total.
//!
//! Row counts are estimated as the query grows, and joins that would make more than
//! [`BUDGET`] rows (or correlated subqueries that would run too many times) are not made, so
//! every query answers in well under a second.

use crate::expr::{Col, Cx, Env, Ex, Mode, Rel, Want};
use crate::from::Item;
use crate::rng::Rng;
use crate::schema::{Dom, Ty};

/// Selects nest at most this deep (subqueries in subqueries in the outermost select).
pub const MAX_DEPTH: u32 = 3;
/// The most (outer rows × inner rows) a correlated subquery may cost.
const CORRELATED_BUDGET: f64 = 1_500_000.0;

/// One query, and whether its answer's order is determined (its outermost ORDER BY orders by
/// every output column, whose values all have one text each).
pub struct Generated {
    pub sql: String,
    pub ordered: bool,
}

/// The `index`th query of the run `seed`.
pub fn generate(seed: u64, index: u64) -> Generated {
    let mut rng = Rng::for_query(seed, index);
    let simple = rng.chance(25);
    let mut g = Gen {
        rng,
        simple,
        depth: 0,
        next_alias: 0,
        ctes: Vec::new(),
        bare: Vec::new(),
    };
    g.top()
}

pub struct Cte {
    pub name: String,
    pub cols: Vec<Col>,
    pub rows: f64,
}

pub struct Gen {
    pub rng: Rng,
    /// A simple query: one or two tables, columns and plain aggregates, no subqueries; the
    /// shapes the proxy answers on its fast paths (one shard, streaming merge, grouped merge,
    /// partial aggregation).
    pub simple: bool,
    /// How many selects enclose the expression being generated.
    pub depth: u32,
    pub next_alias: u32,
    pub ctes: Vec<Cte>,
    /// Tables named without an alias somewhere in the query (each at most once, so no name
    /// ever shadows another).
    pub bare: Vec<&'static str>,
}

#[derive(Clone, Debug)]
pub struct OutCol {
    pub name: String,
    pub ex: Ex,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tail {
    None,
    /// Ends with an ORDER BY of every output column.
    Ordered,
    /// … followed by LIMIT / OFFSET.
    Limited,
}

pub struct Sel {
    pub sql: String,
    pub cols: Vec<OutCol>,
    pub rows: f64,
    pub tail: Tail,
    /// A column of the FROM clause that an ORDER BY may name though it is not selected
    /// (plain and window selects).
    pub hidden: Option<String>,
}

impl Sel {
    fn all_clean(&self) -> bool {
        self.cols.iter().all(|c| c.ex.clean())
    }
}

/// What a select must be.
#[derive(Clone, Default)]
pub struct Req {
    /// Exactly these output columns.
    pub wants: Option<Vec<Want>>,
    /// Every output column clean (see `Ex::clean`).
    pub clean: bool,
    /// At most one row (a scalar subquery).
    pub one_row: bool,
    /// Under EXISTS: the select list does not matter.
    pub exists: bool,
    /// The outermost select: array_agg allowed.
    pub top: bool,
    /// Output columns may keep the names PostgreSQL gives them (else `AS cN`).
    pub natural: bool,
    /// The (single) output column should hold values of this domain.
    pub dom: Option<Dom>,
    /// May end with ORDER BY … LIMIT.
    pub limit: bool,
    pub max_cols: usize,
}

impl Req {
    pub fn sub() -> Req {
        Req {
            max_cols: 3,
            limit: true,
            ..Req::default()
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Plain,
    Agg,
    Group,
    Window,
    Distinct,
    DistinctOn,
}

impl Gen {
    pub fn alias(&mut self) -> String {
        self.next_alias += 1;
        format!("t{}", self.next_alias)
    }

    fn top(&mut self) -> Generated {
        let with = if !self.simple && self.rng.chance(22) {
            self.with_clause()
        } else {
            String::new()
        };
        let req = Req {
            top: true,
            natural: true,
            max_cols: 5,
            ..Req::default()
        };
        let body = self.select(&req, &[], 1.0);
        let mut sql = format!("{with}{}", body.sql);
        let mut ordered = body.tail != Tail::None;
        match body.tail {
            Tail::None if body.all_clean() && self.rng.chance(55) => {
                let all = self.order_all(body.cols.len(), 0);
                match &body.hidden {
                    // A column not selected first: the proxy fetches it hidden.
                    Some(h) if self.rng.chance(30) => {
                        let dir = self.order_dir();
                        sql.push_str(&format!(" ORDER BY {h}{dir},{}", &all[" ORDER BY".len()..]));
                    }
                    _ => sql.push_str(&all),
                }
                ordered = true;
                if self.rng.chance(35) {
                    sql.push_str(&self.limit().0);
                }
            }
            Tail::None if self.rng.chance(20) => {
                // A partial order: the proxy merges by it, the comparison ignores it.
                sql.push_str(" ORDER BY 1");
                sql.push_str(self.order_dir());
            }
            Tail::Ordered if self.rng.chance(30) => sql.push_str(&self.limit().0),
            _ => {}
        }
        Generated { sql, ordered }
    }

    /// ` ORDER BY` every output column (positions 1..=n, the first `fixed` in order first,
    /// the rest shuffled), each ascending or descending, NULLs first or last.
    pub fn order_all(&mut self, n: usize, fixed: usize) -> String {
        let mut rest: Vec<usize> = (fixed + 1..=n).collect();
        for i in (1..rest.len()).rev() {
            let j = self.rng.below(i + 1);
            rest.swap(i, j);
        }
        let keys: Vec<String> = (1..=fixed)
            .chain(rest)
            .map(|i| format!("{i}{}", self.order_dir()))
            .collect();
        format!(" ORDER BY {}", keys.join(", "))
    }

    /// LIMIT / OFFSET / FETCH FIRST, and the most rows it lets through.
    pub fn limit(&mut self) -> (String, f64) {
        let n = *self.rng.pick(&[0, 1, 1, 2, 3, 3, 5, 5, 10, 10, 20, 20, 50]);
        let m = *self.rng.pick(&[0, 1, 2, 3, 7]);
        match self.rng.below(6) {
            0 => (format!(" OFFSET {m}"), f64::MAX),
            1 => (
                format!(" OFFSET {m} ROWS FETCH FIRST {n} ROWS ONLY"),
                n as f64,
            ),
            2 | 3 => (format!(" LIMIT {n} OFFSET {m}"), n as f64),
            _ => (format!(" LIMIT {n}"), n as f64),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Selects and set operations

    /// A select or a set operation of selects; `outer` are the relations a correlated
    /// subquery may name (`outer_rows` of them).
    pub fn select(&mut self, req: &Req, outer: &[Rel], outer_rows: f64) -> Sel {
        if !req.one_row && !self.simple && self.depth + 1 < MAX_DEPTH && self.rng.chance(13) {
            return self.set_op(req, outer, outer_rows);
        }
        self.select_core(req, outer, outer_rows)
    }

    fn set_op(&mut self, req: &Req, outer: &[Rel], outer_rows: f64) -> Sel {
        let ops = [
            "UNION ALL",
            "UNION",
            "INTERSECT",
            "EXCEPT",
            "INTERSECT ALL",
            "EXCEPT ALL",
        ];
        let op = ops[self.rng.weighted(&[35, 25, 12, 14, 5, 9])];
        let clean = req.clean || op != "UNION ALL";
        let arm_req = Req {
            wants: req.wants.clone(),
            clean,
            natural: req.natural,
            dom: req.dom,
            limit: true,
            max_cols: req.max_cols.min(3),
            ..Req::default()
        };
        let left = self.select_core(&arm_req, outer, outer_rows);
        let wants: Vec<Want> = left
            .cols
            .iter()
            .map(|c| Want {
                ty: c.ex.ty,
                num: (c.ex.ty == Ty::Num && clean).then_some(c.ex.num),
                clean,
            })
            .collect();
        let right_req = Req {
            wants: Some(wants.clone()),
            clean,
            dom: req.dom,
            limit: true,
            max_cols: 3,
            ..Req::default()
        };
        let right = self.select_core(&right_req, outer, outer_rows);
        let arm = |s: &Sel| {
            if s.tail == Tail::None {
                s.sql.clone()
            } else {
                format!("({})", s.sql)
            }
        };
        let mut sql = format!("{} {op} {}", arm(&left), arm(&right));
        let mut cols = left.cols.clone();
        for (c, r) in cols.iter_mut().zip(&right.cols) {
            c.ex.num = c.ex.num.either(r.ex.num);
            c.ex.ndv = c.ex.ndv.max(r.ex.ndv);
        }
        let mut rows = match op {
            "UNION ALL" | "UNION" => left.rows + right.rows,
            "INTERSECT" | "INTERSECT ALL" => left.rows.min(right.rows),
            _ => left.rows,
        };
        if self.rng.chance(15) {
            let third = self.select_core(&right_req, outer, outer_rows);
            let op2 = if clean {
                ops[self.rng.weighted(&[35, 25, 12, 14, 5, 9])]
            } else {
                "UNION ALL"
            };
            sql = format!("({sql}) {op2} {}", arm(&third));
            for (c, r) in cols.iter_mut().zip(&third.cols) {
                c.ex.num = c.ex.num.either(r.ex.num);
            }
            rows += third.rows;
        }
        Sel {
            sql,
            cols,
            rows,
            tail: Tail::None,
            hidden: None,
        }
    }

    pub fn select_core(&mut self, req: &Req, outer: &[Rel], outer_rows: f64) -> Sel {
        self.depth += 1;
        let sel = self.select_inner(req, outer, outer_rows);
        self.depth -= 1;
        sel
    }

    fn select_inner(&mut self, req: &Req, outer: &[Rel], outer_rows: f64) -> Sel {
        let from = if self.rng.chance(4) {
            Item {
                sql: String::new(),
                rels: Vec::new(),
                rows: 1.0,
                conds: Vec::new(),
            }
        } else {
            self.build_from(outer)
        };
        let mut env = Env {
            local: from.rels,
            outer: outer.to_vec(),
            rows: from.rows,
        };
        // A correlated subquery runs once per outer row: only over few rows.
        if outer_rows * env.rows.max(1.0) > CORRELATED_BUDGET {
            env.outer.clear();
        }
        let sub_ok = self.depth < MAX_DEPTH && !self.simple;
        if self.simple {
            env.outer.clear();
        }
        let mut conds = from.conds;
        if !env.outer.is_empty() && !env.local.is_empty() && self.rng.chance(75) {
            if let Some((c, sel)) = self.correlation(&env) {
                conds.push(c);
                env.rows = (env.rows * sel).max(1.0);
            }
        }
        if self.rng.chance(50) {
            conds.push(self.pred(&Cx::row(&env, sub_ok), 2));
            env.rows = (env.rows * 0.4).max(1.0);
        }
        if self.rng.chance(22) && env.local.iter().any(|r| r.cols.iter().any(|c| c.key)) {
            conds.push(self.key_pred(&env));
            env.rows = (env.rows * 0.05).max(1.0);
        }

        let has_from = !env.local.is_empty();
        let shape = if req.one_row {
            if self.rng.chance(75) {
                Shape::Agg
            } else {
                Shape::Plain
            }
        } else {
            let w = if self.simple {
                [40, 12, if has_from { 35 } else { 0 }, 0, 10, 0]
            } else {
                [
                    45,
                    10,
                    if has_from { 22 } else { 0 },
                    if has_from { 9 } else { 0 },
                    8,
                    if has_from { 6 } else { 0 },
                ]
            };
            [
                Shape::Plain,
                Shape::Agg,
                Shape::Group,
                Shape::Window,
                Shape::Distinct,
                Shape::DistinctOn,
            ][self.rng.weighted(&w)]
        };
        let n = match &req.wants {
            Some(w) => w.len(),
            None if req.one_row => 1,
            None => 1 + self.rng.below(req.max_cols.max(1)),
        };
        let clean = req.clean || matches!(shape, Shape::Distinct | Shape::DistinctOn);
        let wants: Vec<Want> = match &req.wants {
            Some(w) => w
                .iter()
                .map(|w| Want {
                    clean: w.clean || clean,
                    ..*w
                })
                .collect(),
            None => (0..n)
                .map(|_| {
                    let ty = self.some_type(&env);
                    Want {
                        ty,
                        num: None,
                        clean,
                    }
                })
                .collect(),
        };
        // A scalar subquery's single row from a plain select: ORDER BY it, LIMIT 1.
        let wants = if req.one_row && shape == Shape::Plain {
            vec![Want {
                clean: true,
                ..wants[0]
            }]
        } else {
            wants
        };

        let mut group_by = String::new();
        let mut having = String::new();
        let mut items: Vec<Ex> = Vec::new();
        let mut rows = env.rows;
        let mut distinct = "";
        match shape {
            Shape::Plain | Shape::Distinct | Shape::DistinctOn => {
                for (i, w) in wants.iter().enumerate() {
                    let e = match req.dom {
                        Some(dom) if i == 0 && self.rng.chance(70) => {
                            self.dom_column(&env, *w, dom)
                        }
                        _ => None,
                    };
                    let e = e.unwrap_or_else(|| self.expr(&Cx::row(&env, sub_ok), *w, 2));
                    items.push(e);
                }
                if req.exists && self.rng.chance(50) {
                    items = vec![Ex::new("1".into(), Ty::Int)];
                }
                if shape == Shape::Distinct {
                    distinct = "DISTINCT ";
                    rows = rows.min(items.iter().map(|e| e.ndv as f64).product());
                }
            }
            Shape::Agg => {
                let cx = Cx {
                    env: &env,
                    mode: Mode::Group(&[]),
                    sub: sub_ok,
                };
                for (i, w) in wants.iter().enumerate() {
                    let e = if req.top && req.wants.is_none() && self.rng.chance(8) {
                        self.aggregate(&env, Ty::Arr)
                    } else if i == 0 {
                        // At least one aggregate, or there would be a row per input row.
                        let e = self.aggregate(&env, w.ty);
                        self.fit(&cx, e, *w)
                    } else {
                        self.expr(&cx, *w, 2)
                    };
                    items.push(e);
                }
                if self.rng.chance(15) {
                    having = format!(" HAVING {}", self.pred(&cx, 1));
                }
                rows = 1.0;
            }
            Shape::Group => {
                let (keys, clause, sets) = self.group_keys(&env);
                let cx = Cx {
                    env: &env,
                    mode: Mode::Group(&keys),
                    sub: sub_ok,
                };
                let ordinal = req.wants.is_none() && self.rng.chance(20);
                if req.wants.is_none() {
                    for k in &keys {
                        if ordinal || self.rng.chance(80) {
                            items.push(k.clone());
                        }
                    }
                }
                let group_sql = if ordinal {
                    (1..=keys.len())
                        .map(|i| i.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                } else {
                    clause
                };
                for w in &wants {
                    if items.len() >= wants.len().max(keys.len() + 1) && req.wants.is_none() {
                        break;
                    }
                    let fits: Vec<&Ex> = keys
                        .iter()
                        .filter(|k| k.ty == w.ty && w.num.is_none_or(|n| k.num == n) && k.clean())
                        .collect();
                    let e = if req.wants.is_some() && !fits.is_empty() && self.rng.chance(50) {
                        (*self.rng.pick(&fits)).clone()
                    } else if sets && self.rng.chance(15) && w.ty == Ty::Int && w.num.is_none() {
                        let k = self.rng.pick(&keys).sql.clone();
                        Ex::new(format!("grouping({k})"), Ty::Int)
                    } else if req.top && req.wants.is_none() && self.rng.chance(8) {
                        self.aggregate(&env, Ty::Arr)
                    } else {
                        self.expr(&cx, *w, 2)
                    };
                    items.push(e);
                }
                if items.is_empty() {
                    items.push(Ex::new("count(*)".into(), Ty::Int));
                }
                group_by = format!(" GROUP BY {group_sql}");
                if self.rng.chance(30) {
                    having = format!(" HAVING {}", self.pred(&cx, 1));
                }
                let groups: f64 = keys.iter().map(|k| k.ndv.max(1) as f64).product();
                rows = rows.min(groups * if sets { 2.0 } else { 1.0 });
            }
            Shape::Window => {
                let cx = Cx {
                    env: &env,
                    mode: Mode::Window,
                    sub: sub_ok,
                };
                let forced = self.rng.below(wants.len());
                for (i, w) in wants.iter().enumerate() {
                    let e = if i == forced {
                        let e = self.window_fn(&env, w.ty);
                        self.fit(&cx, e, *w)
                    } else {
                        self.expr(&cx, *w, 2)
                    };
                    items.push(e);
                }
            }
        }

        // The select list, named.
        let mut cols = Vec::new();
        let mut list = Vec::new();
        for (i, e) in items.into_iter().enumerate() {
            let natural = req.natural && self.rng.chance(35);
            let name = if natural {
                // PostgreSQL names it; only the outermost select's names are read.
                list.push(e.sql.clone());
                "?".into()
            } else {
                list.push(format!("{} AS c{i}", e.sql));
                format!("c{i}")
            };
            cols.push(OutCol { name, ex: e });
        }
        let mut sql = String::from("SELECT ");
        let mut tail = Tail::None;
        let on_k = 1 + self.rng.below(cols.len().min(2));
        if shape == Shape::DistinctOn {
            let on: Vec<String> = (1..=on_k).map(|i| i.to_string()).collect();
            sql.push_str(&format!("DISTINCT ON ({}) ", on.join(", ")));
        } else {
            sql.push_str(distinct);
        }
        sql.push_str(&list.join(", "));
        if !from.sql.is_empty() {
            sql.push_str(" FROM ");
            sql.push_str(&from.sql);
        }
        if !conds.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conds.join(" AND "));
        }
        sql.push_str(&group_by);
        sql.push_str(&having);
        let all_clean = cols.iter().all(|c| c.ex.clean());
        if shape == Shape::DistinctOn {
            sql.push_str(&self.order_all(cols.len(), on_k));
            tail = Tail::Ordered;
            rows = rows.min(50.0);
        } else if req.one_row && shape == Shape::Plain {
            sql.push_str(" ORDER BY 1");
            sql.push_str(self.order_dir());
            sql.push_str(" LIMIT 1");
            tail = Tail::Limited;
            rows = 1.0;
        }
        if req.limit && all_clean && !req.one_row && self.rng.chance(14) {
            if tail == Tail::None {
                sql.push_str(&self.order_all(cols.len(), 0));
            }
            if tail != Tail::Limited {
                let (limit, most) = self.limit();
                sql.push_str(&limit);
                tail = Tail::Limited;
                rows = rows.min(most);
            }
        }
        let hidden = if matches!(shape, Shape::Plain | Shape::Window) && !req.one_row {
            let cols: Vec<String> = env
                .local
                .iter()
                .flat_map(|r| {
                    r.cols
                        .iter()
                        .filter(|c| c.ty != Ty::Arr)
                        .map(move |c| r.ex(c).sql)
                })
                .collect();
            (!cols.is_empty()).then(|| self.rng.pick(&cols).clone())
        } else {
            None
        };
        Sel {
            sql,
            cols,
            rows: rows.max(1.0),
            tail,
            hidden,
        }
    }
}
