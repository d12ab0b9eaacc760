//! Aggregates and group keys (in grouped selects) and window functions (in window selects):
//! only those whose value does not depend on the order rows reach them — string_agg and
//! array_agg order by their own argument, window functions use the default RANGE frame or none.

use crate::expr::{round, Cx, Env, Ex, Want};
use crate::query::Gen;
use crate::schema::{NumClass, Ty};

impl Gen {
    // Aggregates and window functions

    /// An aggregate call of result type `ty` over the rows of `env` (a grouped select's).
    pub fn aggregate(&mut self, env: &Env, ty: Ty) -> Ex {
        // Arguments naming only outer columns would make it the outer select's aggregate.
        let env = &env.local_only();
        let cx = Cx::row(env, false);
        let filter = if self.rng.chance(18) {
            format!(" FILTER (WHERE {})", self.pred(&cx, 1))
        } else {
            String::new()
        };
        let mut e = match ty {
            Ty::Int => match self.rng.weighted(&[30, 15, 10, 20, 20]) {
                0 => Ex::new("count(*)".into(), Ty::Int),
                1 => {
                    let t = self.some_type(env);
                    let a = self.expr(&cx, Want::any(t), 1);
                    Ex::new(format!("count({})", a.sql), Ty::Int)
                }
                2 => {
                    let t = self.some_type(env);
                    let a = self.expr(&cx, Want::any(t), 1);
                    Ex::new(format!("count(DISTINCT {})", a.sql), Ty::Int)
                }
                3 => {
                    let a = self.expr(&cx, Want::any(Ty::Int), 1);
                    let dist = if self.rng.chance(15) { "DISTINCT " } else { "" };
                    let mut e = Ex::new(format!("sum({dist}{})", a.sql), Ty::Int);
                    e.huge = a.huge;
                    e
                }
                _ => {
                    let a = self.expr(&cx, Want::any(Ty::Int), 1);
                    let f = if self.rng.chance(50) { "min" } else { "max" };
                    let mut e = Ex::new(format!("{f}({})", a.sql), Ty::Int);
                    e.huge = a.huge;
                    e.dom = a.dom;
                    e
                }
            },
            Ty::Num => match self.rng.weighted(&[30, 20, 25]) {
                0 => {
                    let dist = self.rng.chance(15);
                    let a = self.expr(
                        &cx,
                        Want {
                            ty: Ty::Num,
                            num: None,
                            clean: dist,
                        },
                        1,
                    );
                    let num = match a.num {
                        NumClass::Fixed(s) => NumClass::Fixed(s),
                        _ => NumClass::Dirty,
                    };
                    let dist = if dist { "DISTINCT " } else { "" };
                    Ex::num(format!("sum({dist}{})", a.sql), num)
                }
                1 => {
                    let t = if self.rng.chance(50) {
                        Ty::Int
                    } else {
                        Ty::Num
                    };
                    let a = self.expr(&cx, Want::clean(t), 1);
                    Ex::num(format!("avg({})", a.sql), NumClass::Dirty)
                }
                _ => {
                    let a = self.expr(&cx, Want::clean(Ty::Num), 1);
                    let f = if self.rng.chance(50) { "min" } else { "max" };
                    let mut e = a.clone();
                    e.sql = format!("{f}({})", a.sql);
                    e
                }
            },
            Ty::Text if self.rng.chance(45) => {
                let mut a = self.expr(&cx, Want::any(Ty::Text), 1);
                if a.sql.starts_with('\'') {
                    // An unknown-typed literal would not match its own ORDER BY.
                    a.sql.push_str("::text");
                }
                let sep = self.rng.pick(&["','", "'|'", "''", "' '"]).to_string();
                let dir = self.order_dir();
                if self.rng.chance(25) {
                    Ex::new(
                        format!("string_agg(DISTINCT {0}, {sep} ORDER BY {0}{dir})", a.sql),
                        Ty::Text,
                    )
                } else {
                    Ex::new(
                        format!("string_agg({0}, {sep} ORDER BY {0}{dir})", a.sql),
                        Ty::Text,
                    )
                }
            }
            Ty::Bool => {
                let p = self.pred(&cx, 1);
                let f = self.rng.pick(&["bool_and", "bool_or", "every"]);
                Ex::new(format!("{f}({p})"), Ty::Bool)
            }
            Ty::Arr => {
                let t = *self
                    .rng
                    .pick(&[Ty::Int, Ty::Int, Ty::Text, Ty::Num, Ty::Date, Ty::Bool]);
                let mut a = self.expr(&cx, Want::clean(t), 1);
                if a.sql.starts_with('\'') {
                    // array_agg of an unknown-typed literal is ambiguous.
                    a.sql.push_str("::text");
                }
                let dir = self.order_dir();
                let sql = if self.rng.chance(25) {
                    format!("array_agg(DISTINCT {0} ORDER BY {0}{dir})", a.sql)
                } else {
                    format!("array_agg({0} ORDER BY {0}{dir})", a.sql)
                };
                Ex::new(sql, Ty::Arr)
            }
            _ => {
                // min / max of text, date, timestamptz
                let a = self.expr(&cx, Want::clean(ty), 1);
                let f = if self.rng.chance(50) { "min" } else { "max" };
                let mut e = a.clone();
                e.sql = format!("{f}({})", a.sql);
                e
            }
        };
        e.sql.push_str(&filter);
        // Aggregates and window functions take few values (counts of 1, say): joins on them
        // are estimated as such.
        e.ndv = 3;
        e
    }

    /// ` DESC`, ` NULLS FIRST`, … or nothing.
    pub fn order_dir(&mut self) -> &'static str {
        const DIRS: &[&str] = &[
            "",
            "",
            " DESC",
            " ASC",
            " NULLS FIRST",
            " DESC NULLS LAST",
            " DESC NULLS FIRST",
        ];
        DIRS[self.rng.below(DIRS.len())]
    }

    /// A window function of result type `ty` over `env`'s rows. Only functions whose value
    /// does not depend on the order of peer rows: rank, dense_rank, and aggregates over the
    /// default RANGE frame (which takes in every peer) or over the whole partition.
    pub fn window_fn(&mut self, env: &Env, ty: Ty) -> Ex {
        let env = &env.local_only();
        let cx = Cx::row(env, false);
        let mut over = Vec::new();
        if self.rng.chance(70) {
            let n = 1 + self.rng.below(2);
            let parts: Vec<String> = (0..n)
                .map(|_| {
                    let t = self.some_type(env);
                    self.expr(&cx, Want::any(t), 1).sql
                })
                .collect();
            over.push(format!("PARTITION BY {}", parts.join(", ")));
        }
        let ranked = ty == Ty::Int && self.rng.chance(40);
        if ranked || self.rng.chance(55) {
            let n = 1 + self.rng.below(2);
            let keys: Vec<String> = (0..n)
                .map(|_| {
                    let t = self.some_type(env);
                    let e = self.expr(&cx, Want::any(t), 1).sql;
                    format!("{e}{}", self.order_dir())
                })
                .collect();
            over.push(format!("ORDER BY {}", keys.join(", ")));
        }
        let over = over.join(" ");
        let mut e = match ty {
            Ty::Int if ranked => {
                let f = self.rng.pick(&["rank()", "dense_rank()"]);
                Ex::new(format!("{f} OVER ({over})"), Ty::Int)
            }
            Ty::Int => match self.rng.weighted(&[30, 15, 25, 20]) {
                0 => Ex::new(format!("count(*) OVER ({over})"), Ty::Int),
                1 => {
                    let t = self.some_type(env);
                    let a = self.expr(&cx, Want::any(t), 1);
                    Ex::new(format!("count({}) OVER ({over})", a.sql), Ty::Int)
                }
                2 => {
                    let a = self.expr(&cx, Want::any(Ty::Int), 1);
                    let mut e = Ex::new(format!("sum({}) OVER ({over})", a.sql), Ty::Int);
                    e.huge = a.huge;
                    e
                }
                _ => {
                    let a = self.expr(&cx, Want::any(Ty::Int), 1);
                    let f = if self.rng.chance(50) { "min" } else { "max" };
                    let mut e = a.clone();
                    e.sql = format!("{f}({}) OVER ({over})", a.sql);
                    e
                }
            },
            Ty::Num if self.rng.chance(50) => {
                let a = self.expr(&cx, Want::any(Ty::Num), 1);
                let num = match a.num {
                    NumClass::Fixed(s) => NumClass::Fixed(s),
                    _ => NumClass::Dirty,
                };
                Ex::num(format!("sum({}) OVER ({over})", a.sql), num)
            }
            Ty::Bool => {
                let p = self.pred(&cx, 1);
                Ex::new(format!("bool_or({p}) OVER ({over})"), Ty::Bool)
            }
            _ => {
                let a = self.expr(&cx, Want::clean(ty), 1);
                let f = if self.rng.chance(50) { "min" } else { "max" };
                let mut e = a.clone();
                e.sql = format!("{f}({}) OVER ({over})", a.sql);
                e
            }
        };
        // Aggregates and window functions take few values (counts of 1, say): joins on them
        // are estimated as such.
        e.ndv = 3;
        e
    }

    /// The group keys, the GROUP BY clause over them (a list, ROLLUP, CUBE or GROUPING SETS),
    /// and whether it has grouping sets.
    pub fn group_keys(&mut self, env: &Env) -> (Vec<Ex>, String, bool) {
        let n = 1 + self.rng.weighted(&[50, 35, 15]);
        let mut keys: Vec<Ex> = Vec::new();
        for _ in 0..n {
            let e = self.key_expr(env);
            if !keys.iter().any(|k| k.sql == e.sql) {
                keys.push(e);
            }
        }
        let list: Vec<&str> = keys.iter().map(|k| k.sql.as_str()).collect();
        let (clause, sets) = match self.rng.weighted(&[62, 13, 8, 12, 5]) {
            1 => (format!("ROLLUP ({})", list.join(", ")), true),
            2 => (format!("CUBE ({})", list.join(", ")), true),
            3 => {
                let mut sets = vec![format!("({})", list.join(", "))];
                for k in &list {
                    if self.rng.chance(60) {
                        sets.push(format!("({k})"));
                    }
                }
                if self.rng.chance(60) {
                    sets.push("()".into());
                }
                (format!("GROUPING SETS ({})", sets.join(", ")), true)
            }
            4 if list.len() > 1 => (
                format!("{}, ROLLUP ({})", list[0], list[1..].join(", ")),
                true,
            ),
            _ => (list.join(", "), false),
        };
        (keys, clause, sets)
    }

    /// A group key: a column, or an expression over one (never a bare literal, which GROUP BY
    /// would read as a position or refuse).
    fn key_expr(&mut self, env: &Env) -> Ex {
        let cols: Vec<Ex> = env
            .local
            .iter()
            .flat_map(|r| r.cols.iter().map(move |c| r.ex(c)))
            .filter(|e| e.ty != Ty::Arr)
            .map(|e| if e.clean() { e } else { round(e, 2) })
            .collect();
        let c = self.rng.pick(&cols).clone();
        if self.rng.chance(72) {
            return c;
        }
        let mut e = c.clone();
        match (c.ty, self.rng.below(3)) {
            (Ty::Int, 0) if !c.huge => {
                e.sql = format!("({} % {})", c.sql, self.rng.range(2, 5));
                e.ndv = 9;
            }
            (Ty::Int, 1) => e.sql = format!("COALESCE({}, 0)", c.sql),
            (Ty::Text, 0) => e.sql = format!("lower({})", c.sql),
            (Ty::Text, 1) => {
                e.sql = format!("left({}, 1)", c.sql);
                e.ndv = 20;
            }
            (Ty::Date, 0) => e.sql = format!("({} + 3)", c.sql),
            (Ty::Num, 0) => {
                e.sql = format!("round({}, 0)", c.sql);
                e.num = NumClass::Fixed(0);
            }
            (Ty::Bool, 0) => e.sql = format!("NOT {}", c.sql),
            _ => {
                e = Ex::new(format!("{} IS NULL", c.sql), Ty::Bool);
                e.ndv = 2;
            }
        }
        e
    }
}
