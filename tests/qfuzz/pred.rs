//! Conditions: comparisons (with NULLs too), IS [NOT] NULL, IS DISTINCT FROM, BETWEEN, IN
//! lists, LIKE, AND/OR/NOT, sharding-key conditions (`= 17`, IN lists, `= ANY (ARRAY[…])`) and
//! subqueries: [NOT] EXISTS, [NOT] IN, scalar comparisons, ANY / ALL.

use crate::expr::{Cx, Env, Ex, Mode, Want};
use crate::from::joinable;
use crate::query::{Gen, Req, MAX_DEPTH};
use crate::schema::{type_name, Ty};

const CMP: &[&str] = &["=", "<>", "<", "<=", ">", ">="];

impl Gen {
    // Predicates

    /// A boolean condition, at most `d` connectives deep.
    pub fn pred(&mut self, cx: &Cx, d: u32) -> String {
        let sub_ok = cx.sub && self.depth < MAX_DEPTH;
        let key_ok = matches!(cx.mode, Mode::Row)
            && cx.env.local.iter().any(|r| r.cols.iter().any(|c| c.key));
        let w = [
            30,
            10,
            5,
            5,
            8,
            4,
            6,
            if d > 0 { 14 } else { 0 },
            if sub_ok { 9 } else { 0 },
            if key_ok { 8 } else { 0 },
        ];
        let dd = d.saturating_sub(1);
        match self.rng.weighted(&w) {
            0 => {
                let ty = self.pred_type(
                    cx,
                    &[
                        Ty::Int,
                        Ty::Int,
                        Ty::Int,
                        Ty::Num,
                        Ty::Text,
                        Ty::Text,
                        Ty::Date,
                        Ty::Ts,
                    ],
                );
                let a = self.subject(cx, ty, dd.min(1));
                let b = if self.rng.chance(70) {
                    self.lit_like(&a)
                } else {
                    self.expr_raw(cx, ty, dd.min(1))
                };
                let op = self.rng.pick(CMP);
                format!("{} {op} {}", a.sql, b.sql)
            }
            1 => {
                let t = self.some_type(cx.env);
                let a = self.subject(cx, t, dd.min(1));
                let not = if self.rng.chance(40) { " NOT" } else { "" };
                if t == Ty::Bool {
                    format!("({}) IS{not} NULL", a.sql)
                } else {
                    format!("{} IS{not} NULL", a.sql)
                }
            }
            2 => {
                let t = self.pred_type(cx, &[Ty::Int, Ty::Text, Ty::Num, Ty::Date]);
                let a = self.subject(cx, t, 0);
                let b = if self.rng.chance(50) {
                    self.lit_like(&a)
                } else {
                    self.expr_raw(cx, t, 0)
                };
                let not = if self.rng.chance(50) { " NOT" } else { "" };
                format!("{} IS{not} DISTINCT FROM {}", a.sql, b.sql)
            }
            3 => {
                let t = self.pred_type(cx, &[Ty::Int, Ty::Int, Ty::Num, Ty::Date, Ty::Text]);
                let a = self.subject(cx, t, dd.min(1));
                let (mut x, mut y) = (self.lit_like(&a), self.lit_like(&a));
                // Mostly low to high (the other way round selects nothing).
                if self.rng.chance(85) && literal_order(&y.sql) < literal_order(&x.sql) {
                    std::mem::swap(&mut x, &mut y);
                }
                let not = if self.rng.chance(25) { " NOT" } else { "" };
                format!("{}{not} BETWEEN {} AND {}", a.sql, x.sql, y.sql)
            }
            4 => {
                let t = self.pred_type(cx, &[Ty::Int, Ty::Int, Ty::Text, Ty::Num, Ty::Date]);
                let a = self.subject(cx, t, dd.min(1));
                let n = 1 + self.rng.below(4);
                let mut items: Vec<String> = (0..n).map(|_| self.lit_like(&a).sql).collect();
                if self.rng.chance(20) {
                    items.push(format!("NULL::{}", type_name(t)));
                }
                let not = if self.rng.chance(30) { " NOT" } else { "" };
                format!("{}{not} IN ({})", a.sql, items.join(", "))
            }
            5 => {
                let a = self.subject(cx, Ty::Text, dd.min(1));
                let pat = self
                    .rng
                    .pick(&["'a%'", "'%a%'", "'_'", "'%'", "'P%'", "'%o'", "''"]);
                let not = if self.rng.chance(30) { " NOT" } else { "" };
                format!("{}{not} LIKE {pat}", a.sql)
            }
            6 => {
                let a = self.subject(cx, Ty::Bool, 0);
                match self.rng.below(5) {
                    0 => format!("NOT ({})", a.sql),
                    1 => format!("({}) IS TRUE", a.sql),
                    2 => format!("({}) IS NOT FALSE", a.sql),
                    3 => format!("({}) IS UNKNOWN", a.sql),
                    _ => a.sql,
                }
            }
            7 => {
                let p = self.pred(cx, dd);
                let q = self.pred(cx, dd);
                match self.rng.below(5) {
                    0 | 1 => format!("({p} AND {q})"),
                    2 | 3 => format!("({p} OR {q})"),
                    _ => format!("NOT ({p})"),
                }
            }
            8 => self.sub_pred(cx),
            _ => self.key_pred(cx.env),
        }
    }

    /// A type for a condition's subject: mostly one of `choices` that a column in scope has.
    fn pred_type(&mut self, cx: &Cx, choices: &[Ty]) -> Ty {
        let present: Vec<Ty> = choices
            .iter()
            .copied()
            .filter(|t| {
                cx.env
                    .local
                    .iter()
                    .any(|r| r.cols.iter().any(|c| c.ty == *t))
            })
            .collect();
        if !present.is_empty() && self.rng.chance(85) {
            *self.rng.pick(&present)
        } else {
            *self.rng.pick(choices)
        }
    }

    /// What a condition is about: an expression that is not a bare literal, when there is one
    /// (literal against literal is a constant condition, which mostly selects nothing).
    fn subject(&mut self, cx: &Cx, ty: Ty, d: u32) -> Ex {
        for _ in 0..3 {
            let e = self.expr_raw(cx, ty, d);
            if !is_literal(&e.sql) {
                return e;
            }
        }
        self.expr_raw(cx, ty, d)
    }

    /// A sharding-key condition: `t.cust_id = 17`, an IN list, `= ANY (ARRAY[…])`, a range.
    pub fn key_pred(&mut self, env: &Env) -> String {
        let keys: Vec<Ex> = env
            .local
            .iter()
            .flat_map(|r| r.cols.iter().filter(|c| c.key).map(move |c| r.ex(c)))
            .collect();
        if keys.is_empty() {
            return "true".into();
        }
        let k = self.rng.pick(&keys).clone();
        let v = |g: &mut Gen| crate::schema::int_lit(&mut g.rng, k.dom);
        match self.rng.weighted(&[40, 25, 10, 10, 10]) {
            0 => format!("{} = {}", k.sql, v(self)),
            1 => {
                let n = 2 + self.rng.below(4);
                let vals: Vec<String> = (0..n).map(|_| v(self).to_string()).collect();
                format!("{} IN ({})", k.sql, vals.join(", "))
            }
            2 => {
                let (a, b) = (v(self), v(self));
                format!("{} = ANY (ARRAY[{a}, {b}])", k.sql)
            }
            3 => {
                let a = v(self);
                format!("{} BETWEEN {a} AND {}", k.sql, a + self.rng.range(0, 30))
            }
            _ => format!("({0} = {1} OR {0} = {2})", k.sql, v(self), v(self)),
        }
    }

    /// A condition with a subquery: [NOT] EXISTS, [NOT] IN, a comparison with a scalar
    /// subquery, ANY / ALL.
    fn sub_pred(&mut self, cx: &Cx) -> String {
        // In a grouped select (HAVING) subqueries see no row of ours: uncorrelated.
        let (outer, outer_rows) = match cx.mode {
            Mode::Row => cx.env.for_sub(),
            _ => (Vec::new(), 1.0),
        };
        match self.rng.weighted(&[30, 30, 20, 12]) {
            0 => {
                let req = Req {
                    exists: true,
                    ..Req::sub()
                };
                let s = self.select(&req, &outer, outer_rows);
                let not = if self.rng.chance(40) { "NOT " } else { "" };
                format!("{not}EXISTS ({})", s.sql)
            }
            1 => {
                let t = *self
                    .rng
                    .pick(&[Ty::Int, Ty::Int, Ty::Int, Ty::Text, Ty::Num, Ty::Date]);
                let a = self.expr_raw(cx, t, 0);
                let req = Req {
                    wants: Some(vec![Want::any(t)]),
                    dom: Some(a.dom),
                    ..Req::sub()
                };
                let s = self.select(&req, &outer, outer_rows);
                let not = if self.rng.chance(35) { " NOT" } else { "" };
                format!("{}{not} IN ({})", a.sql, s.sql)
            }
            2 => {
                let t = *self
                    .rng
                    .pick(&[Ty::Int, Ty::Int, Ty::Num, Ty::Text, Ty::Date]);
                let a = self.expr_raw(cx, t, 0);
                let s = self.scalar_subquery(cx, Want::any(t));
                let op = self.rng.pick(CMP);
                format!("{} {op} {}", a.sql, s.sql)
            }
            _ => {
                let t = *self.rng.pick(&[Ty::Int, Ty::Int, Ty::Num, Ty::Text]);
                let a = self.expr_raw(cx, t, 0);
                let req = Req {
                    wants: Some(vec![Want::any(t)]),
                    dom: Some(a.dom),
                    ..Req::sub()
                };
                let s = self.select(&req, &outer, outer_rows);
                let op = self.rng.pick(CMP);
                let q = if self.rng.chance(60) { "ANY" } else { "ALL" };
                format!("{} {op} {q} ({})", a.sql, s.sql)
            }
        }
    }

    /// `(SELECT …)` answering at most one row of one column.
    pub fn scalar_subquery(&mut self, cx: &Cx, w: Want) -> Ex {
        let (outer, outer_rows) = match cx.mode {
            Mode::Row => cx.env.for_sub(),
            _ => (Vec::new(), 1.0),
        };
        let req = Req {
            wants: Some(vec![w]),
            one_row: true,
            ..Req::sub()
        };
        let s = self.select(&req, &outer, outer_rows);
        let mut e = s.cols[0].ex.clone();
        e.sql = format!("({})", s.sql);
        e
    }

    /// `inner.col = outer.col` over columns of one domain, and its selectivity.
    pub fn correlation(&mut self, env: &Env) -> Option<(String, f64)> {
        let mut pairs = Vec::new();
        for r in &env.local {
            for c in &r.cols {
                for o in &env.outer {
                    for oc in &o.cols {
                        if c.ty == oc.ty && c.dom == oc.dom && joinable(c.dom) {
                            pairs.push((r.ex(c), o.ex(oc)));
                        }
                    }
                }
            }
        }
        if pairs.is_empty() {
            return None;
        }
        let (a, b) = self.rng.pick(&pairs).clone();
        let op = if self.rng.chance(85) { "=" } else { "<>" };
        let sel = if op == "=" {
            1.0 / a.ndv.min(b.ndv).max(1) as f64
        } else {
            1.0
        };
        Some((format!("{} {op} {}", a.sql, b.sql), sel))
    }
}

/// A literal's position in its type's order (numbers by value, dates and text by their
/// characters), for putting BETWEEN's bounds in order; NULL first.
fn literal_order(sql: &str) -> (u8, f64, &str) {
    if sql.starts_with("NULL") {
        return (0, 0.0, "");
    }
    let bare = sql.trim_start_matches('(').trim_end_matches(')');
    match bare.parse::<f64>() {
        Ok(v) => (1, v, ""),
        Err(_) => (1, 0.0, sql),
    }
}

fn is_literal(sql: &str) -> bool {
    sql.starts_with(|c: char| c.is_ascii_digit())
        || [
            "'",
            "DATE '",
            "TIMESTAMPTZ '",
            "NULL::",
            "(-",
            "true",
            "false",
        ]
        .iter()
        .any(|p| sql.starts_with(p))
}
