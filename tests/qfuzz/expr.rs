//! Typed expressions and predicates over the relations in scope: columns, literals, arithmetic
//! that cannot overflow, CASE/COALESCE/NULLIF, NULL comparisons, aggregates (in grouped
//! selects), window functions (in window selects) and subqueries of every kind.
//!
//! Every expression is deterministic and cannot fail at run time: integers are widened to
//! bigint before arithmetic, divisors are non-zero literals, and values near int8's limits
//! (`huge`) take no arithmetic. Numerics carry their [`NumClass`] so that only values whose
//! text is a function of their value reach DISTINCT, GROUP BY, set operations, min/max.

use crate::query::{Gen, MAX_DEPTH};
use crate::schema::{lit, type_name, Dom, NumClass, Ty};

/// A generated expression and what the generator knows of its values.
#[derive(Clone, Debug)]
pub struct Ex {
    pub sql: String,
    pub ty: Ty,
    pub num: NumClass,
    pub dom: Dom,
    pub ndv: u32,
    pub huge: bool,
}

impl Ex {
    pub fn new(sql: String, ty: Ty) -> Ex {
        Ex {
            sql,
            ty,
            num: NumClass::Fixed(0),
            dom: default_dom(ty),
            ndv: 50,
            huge: false,
        }
    }

    pub fn num(sql: String, num: NumClass) -> Ex {
        let mut e = Ex::new(sql, Ty::Num);
        e.num = num;
        e
    }

    /// Equal values always have the same text.
    pub fn clean(&self) -> bool {
        self.ty != Ty::Num || self.num != NumClass::Dirty
    }
}

pub fn default_dom(ty: Ty) -> Dom {
    match ty {
        Ty::Int => Dom::Misc,
        Ty::Num => Dom::Money,
        Ty::Text => Dom::Word,
        Ty::Bool => Dom::Flag,
        Ty::Date => Dom::Day,
        Ty::Ts | Ty::Arr => Dom::Instant,
    }
}

/// A column of a relation in scope.
#[derive(Clone, Debug)]
pub struct Col {
    pub name: String,
    pub ty: Ty,
    pub num: NumClass,
    pub dom: Dom,
    pub ndv: u32,
    /// The sharding key of the base table it belongs to.
    pub key: bool,
    pub huge: bool,
}

/// A relation in scope: a table, subquery, VALUES list, function or WITH query, by its alias.
#[derive(Clone, Debug)]
pub struct Rel {
    pub alias: String,
    pub cols: Vec<Col>,
}

impl Rel {
    pub fn ex(&self, c: &Col) -> Ex {
        Ex {
            sql: format!("{}.{}", self.alias, c.name),
            ty: c.ty,
            num: c.num,
            dom: c.dom,
            ndv: c.ndv,
            huge: c.huge,
        }
    }
}

/// The relations an expression may name: `local` (the select's own FROM) and `outer` (the
/// enclosing selects', for correlated subqueries), with the estimated row counts.
#[derive(Clone, Default)]
pub struct Env {
    pub local: Vec<Rel>,
    pub outer: Vec<Rel>,
    pub rows: f64,
}

impl Env {
    /// The same relations, without the outer ones.
    pub fn local_only(&self) -> Env {
        Env {
            local: self.local.clone(),
            outer: Vec::new(),
            rows: self.rows,
        }
    }

    /// What a subquery of this select may correlate with.
    pub fn for_sub(&self) -> (Vec<Rel>, f64) {
        let mut rels = self.local.clone();
        rels.extend(self.outer.iter().cloned());
        (rels, self.rows.max(1.0))
    }
}

/// Where an expression stands, which decides its leaves.
#[derive(Clone, Copy)]
pub enum Mode<'a> {
    /// Per row: columns.
    Row,
    /// A grouped select's list or HAVING: the group keys (verbatim) and aggregates.
    Group(&'a [Ex]),
    /// A window select's list: columns and window functions.
    Window,
}

pub struct Cx<'a> {
    pub env: &'a Env,
    pub mode: Mode<'a>,
    /// Subqueries allowed.
    pub sub: bool,
}

impl<'a> Cx<'a> {
    pub fn row(env: &'a Env, sub: bool) -> Cx<'a> {
        Cx {
            env,
            mode: Mode::Row,
            sub,
        }
    }
}

/// What a select-list item must be: its type, and (numerics) its class.
#[derive(Clone, Copy, Debug)]
pub struct Want {
    pub ty: Ty,
    /// Exactly this class (set operation arms), or any.
    pub num: Option<NumClass>,
    /// A clean value (see [`Ex::clean`]).
    pub clean: bool,
}

impl Want {
    pub fn any(ty: Ty) -> Want {
        Want {
            ty,
            num: None,
            clean: false,
        }
    }
    pub fn clean(ty: Ty) -> Want {
        Want {
            ty,
            num: None,
            clean: true,
        }
    }
}

pub fn round(e: Ex, s: u8) -> Ex {
    let mut out = Ex::num(format!("round({}, {s})", e.sql), NumClass::Fixed(s));
    out.ndv = e.ndv;
    out
}

impl Gen {
    /// A scalar type for a new expression, weighted towards the columns in scope.
    pub fn some_type(&mut self, env: &Env) -> Ty {
        if !env.local.is_empty() && self.rng.chance(70) {
            let cols: Vec<Ty> = env
                .local
                .iter()
                .flat_map(|r| r.cols.iter().map(|c| c.ty))
                .filter(|t| *t != Ty::Arr)
                .collect();
            if !cols.is_empty() {
                return *self.rng.pick(&cols);
            }
        }
        [
            Ty::Int,
            Ty::Int,
            Ty::Int,
            Ty::Num,
            Ty::Text,
            Ty::Text,
            Ty::Bool,
            Ty::Date,
            Ty::Ts,
        ][self.rng.below(9)]
    }

    /// An expression meeting `w`, at most `d` operators deep.
    pub fn expr(&mut self, cx: &Cx, w: Want, d: u32) -> Ex {
        let e = self.expr_raw(cx, w.ty, d);
        self.fit(cx, e, w)
    }

    /// `e` made to meet `w`'s numeric class.
    pub fn fit(&mut self, cx: &Cx, e: Ex, w: Want) -> Ex {
        if e.ty != Ty::Num {
            return e;
        }
        match w.num {
            Some(NumClass::Fixed(s)) if e.num != NumClass::Fixed(s) => round(e, s),
            Some(NumClass::Canon) if e.num != NumClass::Canon => self.canon_leaf(cx),
            None if w.clean && e.num == NumClass::Dirty => round(e, 2),
            _ => e,
        }
    }

    /// A numeric of class Canon: such a column (or group key), else a literal.
    fn canon_leaf(&mut self, cx: &Cx) -> Ex {
        let found: Vec<Ex> = match cx.mode {
            Mode::Group(keys) => keys
                .iter()
                .filter(|k| k.ty == Ty::Num && k.num == NumClass::Canon)
                .cloned()
                .collect(),
            _ => self
                .columns(cx.env, Ty::Num, false)
                .into_iter()
                .filter(|c| c.num == NumClass::Canon)
                .collect(),
        };
        if !found.is_empty() && self.rng.chance(70) {
            return self.rng.pick(&found).clone();
        }
        if self.rng.chance(20) {
            return Ex::num("NULL::numeric".into(), NumClass::Canon);
        }
        Ex::num(
            lit(&mut self.rng, Ty::Num, NumClass::Canon, Dom::Frac),
            NumClass::Canon,
        )
    }

    /// The columns of type `ty` in scope (the outer ones too when `outer`).
    pub fn columns(&self, env: &Env, ty: Ty, outer: bool) -> Vec<Ex> {
        let rels = if outer { &env.outer } else { &env.local };
        rels.iter()
            .flat_map(|r| r.cols.iter().filter(|c| c.ty == ty).map(move |c| r.ex(c)))
            .collect()
    }

    /// A literal like the values of `like` (its domain and class), or a typed NULL.
    pub fn lit_like(&mut self, like: &Ex) -> Ex {
        if self.rng.chance(6) {
            return Ex::new(format!("NULL::{}", type_name(like.ty)), like.ty);
        }
        let num = match like.num {
            NumClass::Dirty => NumClass::Fixed(2),
            n => n,
        };
        let mut e = Ex::new(lit(&mut self.rng, like.ty, num, like.dom), like.ty);
        e.num = num;
        e.dom = like.dom;
        e.ndv = 1;
        e
    }

    pub fn literal(&mut self, ty: Ty) -> Ex {
        let like = Ex::new(String::new(), ty);
        let mut like = like;
        if ty == Ty::Int {
            like.dom = *self
                .rng
                .pick(&[Dom::Tiny, Dom::Misc, Dom::Cust, Dom::Product]);
        }
        if ty == Ty::Num {
            like.num = *self
                .rng
                .pick(&[NumClass::Fixed(2), NumClass::Fixed(0), NumClass::Canon]);
        }
        self.lit_like(&like)
    }

    pub fn leaf(&mut self, cx: &Cx, ty: Ty) -> Ex {
        match cx.mode {
            Mode::Row => self.row_leaf(cx.env, ty),
            Mode::Group(keys) => {
                let ks: Vec<&Ex> = keys.iter().filter(|k| k.ty == ty).collect();
                if !ks.is_empty() && self.rng.chance(45) {
                    return (*self.rng.pick(&ks)).clone();
                }
                if !self.rng.chance(12) {
                    return self.aggregate(cx.env, ty);
                }
                self.literal(ty)
            }
            Mode::Window => {
                if self.rng.chance(40) {
                    return self.window_fn(cx.env, ty);
                }
                self.row_leaf(cx.env, ty)
            }
        }
    }

    pub fn row_leaf(&mut self, env: &Env, ty: Ty) -> Ex {
        if !env.outer.is_empty() && self.rng.chance(8) {
            let cols = self.columns(env, ty, true);
            if !cols.is_empty() {
                return self.rng.pick(&cols).clone();
            }
        }
        let cols = self.columns(env, ty, false);
        if !cols.is_empty() && self.rng.chance(88) {
            return self.rng.pick(&cols).clone();
        }
        self.literal(ty)
    }

    pub fn expr_raw(&mut self, cx: &Cx, ty: Ty, d: u32) -> Ex {
        let d = if self.simple { 0 } else { d };
        if ty == Ty::Bool {
            let sql = self.pred(cx, d);
            return Ex::new(sql, Ty::Bool);
        }
        if d == 0 || self.rng.chance(45) {
            return self.leaf(cx, ty);
        }
        let sub_ok = cx.sub && self.depth < MAX_DEPTH;
        // Shared forms first: COALESCE, CASE, NULLIF, GREATEST/LEAST, a scalar subquery.
        match self
            .rng
            .weighted(&[10, 10, 4, 4, if sub_ok { 3 } else { 0 }, 66])
        {
            0 => {
                let a = self.expr_raw(cx, ty, d - 1);
                let b = if self.rng.chance(50) {
                    self.lit_like(&a)
                } else {
                    self.expr_raw(cx, ty, d - 1)
                };
                return merge(format!("COALESCE({}, {})", a.sql, b.sql), &a, &b);
            }
            1 => {
                let p = self.pred(cx, d - 1);
                let a = self.expr_raw(cx, ty, d - 1);
                let b = if self.rng.chance(30) {
                    Ex::new(format!("NULL::{}", type_name(ty)), ty)
                } else {
                    self.expr_raw(cx, ty, d - 1)
                };
                let mut b2 = b.clone();
                if b.sql.starts_with("NULL::") {
                    b2.num = a.num;
                }
                return merge(
                    format!("CASE WHEN {p} THEN {} ELSE {} END", a.sql, b.sql),
                    &a,
                    &b2,
                );
            }
            2 => {
                let a = self.expr_raw(cx, ty, d - 1);
                let b = self.lit_like(&a);
                let mut e = a.clone();
                e.sql = format!("NULLIF({}, {})", a.sql, b.sql);
                return e;
            }
            3 if ty != Ty::Ts || self.rng.chance(50) => {
                let a = self.expr_raw(cx, ty, d - 1);
                let b = self.expr_raw(cx, ty, d - 1);
                let f = if self.rng.chance(50) {
                    "GREATEST"
                } else {
                    "LEAST"
                };
                return merge(format!("{f}({}, {})", a.sql, b.sql), &a, &b);
            }
            4 => return self.scalar_subquery(cx, Want::any(ty)),
            _ => {}
        }
        match ty {
            Ty::Int => self.int_op(cx, d),
            Ty::Num => self.num_op(cx, d),
            Ty::Text => self.text_op(cx, d),
            Ty::Date => {
                let a = self.expr_raw(cx, Ty::Date, d - 1);
                let k = self.rng.range(-40, 40);
                let mut e = a.clone();
                e.sql = if k < 0 {
                    format!("({} - {})", a.sql, -k)
                } else {
                    format!("({} + {k})", a.sql)
                };
                e
            }
            _ => self.leaf(cx, ty),
        }
    }

    /// An integer that is safe to compute with.
    fn small_int(&mut self, cx: &Cx, d: u32) -> Ex {
        for _ in 0..3 {
            let e = self.expr_raw(cx, Ty::Int, d);
            if !e.huge {
                return e;
            }
        }
        self.literal(Ty::Int)
    }

    fn int_op(&mut self, cx: &Cx, d: u32) -> Ex {
        let mut out = match self.rng.weighted(&[20, 8, 8, 5, 6, 4]) {
            0 => {
                let a = self.small_int(cx, d - 1);
                let b = if self.rng.chance(50) {
                    self.lit_like(&a)
                } else {
                    self.small_int(cx, d - 1)
                };
                let op = if self.rng.chance(60) { "+" } else { "-" };
                let mut e = Ex::new(format!("({}::int8 {op} {})", a.sql, b.sql), Ty::Int);
                e.dom = a.dom;
                e
            }
            1 => {
                let a = self.small_int(cx, d - 1);
                let k = self.rng.range(0, 4);
                Ex::new(format!("({}::int8 * {k})", a.sql), Ty::Int)
            }
            2 => {
                let a = self.small_int(cx, d - 1);
                let k = self.rng.range(2, 7);
                let mut e = Ex::new(format!("({} % {k})", a.sql), Ty::Int);
                e.dom = Dom::Tiny;
                e.ndv = k as u32 * 2;
                e
            }
            3 => {
                let a = self.small_int(cx, d - 1);
                Ex::new(format!("abs({}::int8)", a.sql), Ty::Int)
            }
            4 => {
                let a = self.expr_raw(cx, Ty::Text, d - 1);
                let mut e = Ex::new(format!("length({})", a.sql), Ty::Int);
                e.dom = Dom::Tiny;
                e
            }
            _ => {
                let a = self.expr_raw(cx, Ty::Date, d - 1);
                let b = self.expr_raw(cx, Ty::Date, d - 1);
                Ex::new(format!("({} - {})", a.sql, b.sql), Ty::Int)
            }
        };
        out.huge = false;
        out
    }

    fn num_op(&mut self, cx: &Cx, d: u32) -> Ex {
        match self.rng.weighted(&[14, 8, 10, 5, 8]) {
            0 => {
                let a = self.expr_raw(cx, Ty::Num, d - 1);
                let b = if self.rng.chance(50) {
                    self.lit_like(&a)
                } else {
                    self.expr_raw(cx, Ty::Num, d - 1)
                };
                let op = if self.rng.chance(60) { "+" } else { "-" };
                let num = match (a.num, b.num) {
                    (NumClass::Fixed(x), NumClass::Fixed(y)) => NumClass::Fixed(x.max(y)),
                    _ => NumClass::Dirty,
                };
                Ex::num(format!("({} {op} {})", a.sql, b.sql), num)
            }
            1 => {
                let a = self.expr_raw(cx, Ty::Num, d - 1);
                let k = self.rng.range(0, 3);
                let num = match a.num {
                    NumClass::Fixed(s) => NumClass::Fixed(s),
                    _ => NumClass::Dirty,
                };
                Ex::num(format!("({} * {k})", a.sql), num)
            }
            2 => {
                let a = self.expr_raw(cx, Ty::Num, d - 1);
                round(a, self.rng.range(0, 3) as u8)
            }
            3 => {
                let a = self.expr_raw(cx, Ty::Num, d - 1);
                let mut e = a.clone();
                e.sql = format!("abs({})", a.sql);
                e
            }
            _ => {
                let a = self.small_int(cx, d - 1);
                Ex::num(format!("{}::numeric", a.sql), NumClass::Fixed(0))
            }
        }
    }

    fn text_op(&mut self, cx: &Cx, d: u32) -> Ex {
        let mut e = match self.rng.weighted(&[8, 10, 8, 6, 8, 4]) {
            0 => {
                let a = self.expr_raw(cx, Ty::Text, d - 1);
                let f = if self.rng.chance(50) {
                    "lower"
                } else {
                    "upper"
                };
                Ex::new(format!("{f}({})", a.sql), Ty::Text)
            }
            1 => {
                let a = self.expr_raw(cx, Ty::Text, d - 1);
                let b = if self.rng.chance(50) {
                    self.literal(Ty::Text)
                } else {
                    self.expr_raw(cx, Ty::Text, d - 1)
                };
                Ex::new(format!("({} || {})", a.sql, b.sql), Ty::Text)
            }
            2 => {
                let a = self.expr_raw(cx, Ty::Text, d - 1);
                let (from, n) = (self.rng.range(1, 3), self.rng.range(1, 4));
                Ex::new(format!("substr({}, {from}, {n})", a.sql), Ty::Text)
            }
            3 => {
                let a = self.expr_raw(cx, Ty::Text, d - 1);
                Ex::new(
                    format!("left({}, {})", a.sql, self.rng.range(1, 3)),
                    Ty::Text,
                )
            }
            4 => {
                let t = *self
                    .rng
                    .pick(&[Ty::Int, Ty::Int, Ty::Date, Ty::Bool, Ty::Num]);
                let a = self.expr_raw(cx, t, d - 1);
                Ex::new(format!("({})::text", a.sql), Ty::Text)
            }
            _ => {
                let a = self.expr_raw(cx, Ty::Text, d - 1);
                let b = self.expr_raw(cx, Ty::Text, d - 1);
                Ex::new(format!("concat({}, '/', {})", a.sql, b.sql), Ty::Text)
            }
        };
        e.dom = Dom::Word;
        e
    }

    /// A column of domain `dom` meeting `w`, if the select has one.
    pub fn dom_column(&mut self, env: &Env, w: Want, dom: Dom) -> Option<Ex> {
        let found: Vec<Ex> = env
            .local
            .iter()
            .flat_map(|r| {
                r.cols
                    .iter()
                    .filter(|c| c.ty == w.ty && c.dom == dom)
                    .map(move |c| r.ex(c))
            })
            .filter(|e| w.num.is_none_or(|n| e.num == n) && (!w.clean || e.clean()))
            .collect();
        if found.is_empty() {
            None
        } else {
            Some(self.rng.pick(&found).clone())
        }
    }
}

/// The expression `sql` that is either `a`'s or `b`'s value.
fn merge(sql: String, a: &Ex, b: &Ex) -> Ex {
    Ex {
        sql,
        ty: a.ty,
        num: a.num.either(b.num),
        dom: a.dom,
        ndv: a.ndv.max(b.ndv),
        huge: a.huge || b.huge,
    }
}
