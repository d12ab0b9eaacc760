//! What the generator knows of the tables: every column's type, the values it holds (its
//! domain, so equalities and joins find rows), roughly how many distinct values, and which
//! columns are sharding keys. Also the tester's own small tables (`qf_…`): heavy duplicates and
//! NULLs in join columns, which the differential data set has little of.

use crate::data::{text_lit, CATEGORIES, CITIES, KINDS, STATUSES, WORDS};
use crate::rng::Rng;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ty {
    /// int2, int4, int8 (and sums of them): compared and rendered alike.
    Int,
    Num,
    Text,
    Bool,
    Date,
    Ts,
    /// array_agg's result: only ever an output column.
    Arr,
}

/// How a numeric value's text relates to its value. Two equal numerics may have different
/// text (1.5 and 1.50); where PostgreSQL keeps one of several equal values (DISTINCT, GROUP BY,
/// UNION, min/max, the row a DISTINCT ON keeps), which text survives depends on row order, so
/// only numerics whose equal values always share their text may go there.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NumClass {
    /// Always exactly this many decimals (numeric(p,s) columns, round(x, s), their sums).
    Fixed(u8),
    /// Never a trailing zero (the unconstrained numeric columns of the data).
    Canon,
    /// Anything else (avg, sums of Canon values, arithmetic mixing scales).
    Dirty,
}

impl NumClass {
    /// The class of a value that is either of two classes' values.
    pub fn either(self, other: NumClass) -> NumClass {
        if self == other {
            self
        } else {
            NumClass::Dirty
        }
    }
}

/// The values a column holds, so literals compared with it and columns joined to it match.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dom {
    Cust,
    Order,
    Product,
    Region,
    Acct,
    Event,
    Item,
    Code,
    /// Small integers: tiers, quantities, line numbers.
    Tiny,
    /// Other integers.
    Misc,
    /// Text: names, titles, notes, labels (the data's word list).
    Word,
    City,
    Status,
    Kind,
    Category,
    Money,
    Frac,
    Day,
    Instant,
    Flag,
}

#[derive(Clone, Copy)]
pub struct ColDef {
    pub name: &'static str,
    pub ty: Ty,
    pub num: NumClass,
    pub dom: Dom,
    pub ndv: u32,
    /// The table's sharding key.
    pub key: bool,
    /// Values near int8's limits: no arithmetic on it.
    pub huge: bool,
}

const fn col(name: &'static str, ty: Ty, dom: Dom, ndv: u32) -> ColDef {
    ColDef {
        name,
        ty,
        num: NumClass::Fixed(0),
        dom,
        ndv,
        key: false,
        huge: false,
    }
}
const fn int(name: &'static str, dom: Dom, ndv: u32) -> ColDef {
    col(name, Ty::Int, dom, ndv)
}
const fn key(name: &'static str, dom: Dom, ndv: u32) -> ColDef {
    let mut c = col(name, Ty::Int, dom, ndv);
    c.key = true;
    c
}
const fn huge(name: &'static str) -> ColDef {
    let mut c = col(name, Ty::Int, Dom::Misc, 400);
    c.huge = true;
    c
}
const fn num(name: &'static str, class: NumClass, ndv: u32) -> ColDef {
    let mut c = col(
        name,
        Ty::Num,
        match class {
            NumClass::Canon => Dom::Frac,
            _ => Dom::Money,
        },
        ndv,
    );
    c.num = class;
    c
}
const fn text(name: &'static str, ndv: u32) -> ColDef {
    col(name, Ty::Text, Dom::Word, ndv)
}
const fn words(name: &'static str, dom: Dom, ndv: u32) -> ColDef {
    col(name, Ty::Text, dom, ndv)
}
const fn boolean(name: &'static str) -> ColDef {
    col(name, Ty::Bool, Dom::Flag, 2)
}
const fn date(name: &'static str, ndv: u32) -> ColDef {
    col(name, Ty::Date, Dom::Day, ndv)
}
const fn ts(name: &'static str, ndv: u32) -> ColDef {
    col(name, Ty::Ts, Dom::Instant, ndv)
}

pub struct TableInfo {
    pub name: &'static str,
    pub rows: f64,
    pub cols: &'static [ColDef],
    /// How often the generator picks it, relative to the others.
    pub weight: u32,
}

const F2: NumClass = NumClass::Fixed(2);

pub const TABLES: &[TableInfo] = &[
    TableInfo {
        name: "df_customers",
        rows: 500.0,
        weight: 12,
        cols: &[
            key("cust_id", Dom::Cust, 500),
            text("name", 400),
            words("city", Dom::City, 12),
            int("tier", Dom::Tiny, 5),
            int("score", Dom::Misc, 450),
            num("balance", F2, 450),
            num("rating", NumClass::Canon, 450),
            boolean("active"),
            date("signup", 400),
            ts("last_seen", 450),
            int("region_id", Dom::Region, 14),
        ],
    },
    TableInfo {
        name: "df_orders",
        rows: 1490.0,
        weight: 12,
        cols: &[
            int("order_id", Dom::Order, 1490),
            key("cust_id", Dom::Cust, 440),
            words("status", Dom::Status, 7),
            int("qty", Dom::Tiny, 13),
            num("amount", F2, 1300),
            num("discount", NumClass::Canon, 1000),
            ts("placed_at", 1300),
            date("ship_date", 700),
            boolean("gift"),
            int("prio", Dom::Tiny, 9),
        ],
    },
    TableInfo {
        name: "df_order_lines",
        rows: 3180.0,
        weight: 8,
        cols: &[
            int("line_no", Dom::Tiny, 4),
            int("order_id", Dom::Order, 1250),
            key("cust_id", Dom::Cust, 440),
            int("product_id", Dom::Product, 65),
            int("qty", Dom::Tiny, 10),
            num("price", F2, 2500),
            text("note", 24),
        ],
    },
    TableInfo {
        name: "df_accounts",
        rows: 400.0,
        weight: 8,
        cols: &[
            key("acct_id", Dom::Acct, 400),
            int("cust_id", Dom::Cust, 330),
            text("label", 24),
            date("opened", 350),
            num("credit", NumClass::Fixed(4), 350),
            int("flags", Dom::Misc, 255),
            boolean("verified"),
            huge("big"),
        ],
    },
    TableInfo {
        name: "df_events",
        rows: 1827.0,
        weight: 8,
        cols: &[
            int("event_id", Dom::Event, 1827),
            key("acct_id", Dom::Acct, 360),
            words("kind", Dom::Kind, 8),
            ts("at", 1600),
            num("value", NumClass::Canon, 1600),
            int("weight", Dom::Misc, 1600),
            boolean("ok"),
            int("small", Dom::Misc, 1600),
            text("\"Tag\"", 5),
        ],
    },
    TableInfo {
        name: "df_products",
        rows: 60.0,
        weight: 14,
        cols: &[
            int("product_id", Dom::Product, 60),
            text("title", 55),
            words("category", Dom::Category, 6),
            num("list_price", F2, 55),
            boolean("discontinued"),
            date("added", 50),
            int("stock", Dom::Misc, 55),
        ],
    },
    TableInfo {
        name: "df_regions",
        rows: 12.0,
        weight: 7,
        cols: &[
            int("region_id", Dom::Region, 12),
            words("rname", Dom::City, 10),
            text("country", 8),
            int("tz", Dom::Tiny, 10),
            int("big", Dom::Misc, 10),
        ],
    },
    TableInfo {
        name: "qf_items",
        rows: 240.0,
        weight: 10,
        cols: &[
            key("item_id", Dom::Item, 240),
            int("cust_id", Dom::Cust, 60),
            int("code", Dom::Code, 10),
            text("grp", 5),
            int("val", Dom::Tiny, 25),
            num("amt", F2, 200),
        ],
    },
    TableInfo {
        name: "qf_codes",
        rows: 16.0,
        weight: 10,
        cols: &[
            int("id", Dom::Item, 16),
            int("code", Dom::Code, 8),
            text("label", 6),
            int("weight", Dom::Tiny, 6),
        ],
    },
    TableInfo {
        name: "qf_notes",
        rows: 20.0,
        weight: 5,
        cols: &[
            int("note_id", Dom::Item, 20),
            int("cust_id", Dom::Cust, 8),
            int("code", Dom::Code, 6),
            text("txt", 6),
        ],
    },
];

// ---------------------------------------------------------------------------------------------
// Literals

/// A word of the domain `dom`'s values (so comparisons find rows), now and then another.
fn word_of(r: &mut Rng, dom: Dom) -> &'static str {
    let list: &[&'static str] = match dom {
        Dom::City => CITIES,
        Dom::Status => STATUSES,
        Dom::Kind => KINDS,
        Dom::Category => CATEGORIES,
        Dom::Word if r.chance(50) => WORDS,
        Dom::Word => QF_WORDS,
        _ => &[],
    };
    if !list.is_empty() && r.chance(80) {
        return list[r.below(list.len())];
    }
    word(r)
}

/// Words the data's text columns hold (so comparisons find rows), and a few they do not.
fn word(r: &mut Rng) -> &'static str {
    match r.below(7) {
        0 => r.pick_str(WORDS),
        1 => r.pick_str(CITIES),
        2 => r.pick_str(STATUSES),
        3 => r.pick_str(KINDS),
        4 => r.pick_str(CATEGORIES),
        5 => r.pick_str(QF_WORDS),
        _ => r.pick_str(&["a", "b", "x", "Paris", "new", "tag", "Ö", "zz", "o"]),
    }
}

/// An integer literal of the column domain `dom`.
pub fn int_lit(r: &mut Rng, dom: Dom) -> i64 {
    match dom {
        Dom::Cust => r.range(1, 530),
        Dom::Order => r.range(1, 1500),
        Dom::Product => r.range(1, 66),
        Dom::Region => r.range(1, 14),
        Dom::Acct => r.range(1001, 1410),
        Dom::Event => r.range(1, 1830),
        Dom::Item => r.range(1, 250),
        Dom::Code => r.range(-1, 10),
        Dom::Tiny => r.range(-1, 12),
        _ => *r.pick(&[-1, 0, 1, 2, 5, 17, 100, 250, 1000, 5000, 50000]),
    }
}

/// A literal of type `ty` (never NULL), of the class `num` when numeric. Negative numbers are
/// parenthesised, so that `a - (-1)` never reads as a comment.
pub fn lit(r: &mut Rng, ty: Ty, num: NumClass, dom: Dom) -> String {
    match ty {
        Ty::Int => {
            let v = int_lit(r, dom);
            if v < 0 {
                format!("({v})")
            } else {
                v.to_string()
            }
        }
        Ty::Num => {
            let int = r.range(-20, 600);
            let s = match num {
                NumClass::Fixed(0) => int.to_string(),
                NumClass::Fixed(s) => {
                    let s = s as u32;
                    format!(
                        "{}{}.{:0w$}",
                        if int < 0 { "-" } else { "" },
                        int.abs(),
                        r.below(10usize.pow(s)),
                        w = s as usize
                    )
                }
                _ => {
                    // Canonical: no trailing zero.
                    let frac = *r.pick(&["", ".5", ".25", ".1", ".75", ".125", ".3"]);
                    format!("{int}{frac}")
                }
            };
            if s.starts_with('-') {
                format!("({s})")
            } else {
                s
            }
        }
        Ty::Text => text_lit(word_of(r, dom)),
        Ty::Bool => r.pick(&["true", "false"]).to_string(),
        Ty::Date => {
            let (y, m, d) = crate::data::civil(crate::data::DAY0_2023 - 300 + r.range(0, 1000));
            format!("DATE '{y:04}-{m:02}-{d:02}'")
        }
        Ty::Ts => {
            let (y, m, d) = crate::data::civil(crate::data::DAY0_2023 + r.range(0, 730));
            let off = r.pick(&["+00", "+02", "-05", "+05:30"]);
            format!(
                "TIMESTAMPTZ '{y:04}-{m:02}-{d:02} {:02}:{:02}:00{off}'",
                r.below(24),
                r.below(60)
            )
        }
        Ty::Arr => "NULL".into(),
    }
}

/// The SQL type name of a typed NULL.
pub fn type_name(ty: Ty) -> &'static str {
    match ty {
        Ty::Int => "int",
        Ty::Num => "numeric",
        Ty::Text => "text",
        Ty::Bool => "bool",
        Ty::Date => "date",
        Ty::Ts => "timestamptz",
        Ty::Arr => "int[]",
    }
}

// ---------------------------------------------------------------------------------------------
// The tester's own tables

const QF_WORDS: &[&str] = &["a", "b", "B", "ä", "", "a b", "O'Brien"];

/// (name, DDL through the proxy, DDL in the reference database)
pub fn qf_tables() -> Vec<(&'static str, String, String)> {
    let items = "item_id bigint PRIMARY KEY, cust_id bigint, code int4, grp text, val int4, \
                 amt numeric(8,2)";
    let codes = "id int4 PRIMARY KEY, code int4, label text, weight int2";
    let notes = "note_id int4 PRIMARY KEY, cust_id bigint, code int4, txt text";
    vec![
        (
            "qf_items",
            format!(
                "CREATE SHARDED TABLE qf_items ({items}) \
                 PARTITION BY CONSISTENT HASH (item_id) PARTITIONS AUTO"
            ),
            format!("CREATE TABLE qf_items ({items})"),
        ),
        (
            "qf_codes",
            format!("CREATE DUPLICATED TABLE qf_codes ({codes})"),
            format!("CREATE TABLE qf_codes ({codes})"),
        ),
        (
            "qf_notes",
            format!("CREATE TABLE qf_notes ({notes})"),
            format!("CREATE TABLE qf_notes ({notes})"),
        ),
    ]
}

/// `v`, or NULL `pct` times in 100.
fn or_null(r: &mut Rng, pct: u32, v: String) -> String {
    if r.chance(pct) {
        "NULL".to_string()
    } else {
        v
    }
}

/// The rows of the `qf_` tables, always the same.
pub fn qf_rows() -> Vec<(&'static str, Vec<String>)> {
    let mut r = Rng::new(0x0f0f_2026_1206);
    let mut items = Vec::new();
    for id in 1..=240 {
        // Customers 1, 2, 3, 5 and 8 hold most items; a fifth have none.
        let cust = if r.chance(55) {
            r.pick(&[1, 2, 3, 5, 8]).to_string()
        } else {
            r.range(1, 530).to_string()
        };
        let cust = or_null(&mut r, 20, cust);
        let code = r.range(0, 9).to_string();
        let code = or_null(&mut r, 15, code);
        let grp = text_lit(r.pick_str(QF_WORDS));
        let grp = or_null(&mut r, 10, grp);
        let val = r.range(-5, 20).to_string();
        let val = or_null(&mut r, 10, val);
        let amt = format!("{}.{:02}", r.range(-10, 300), r.below(100));
        let amt = or_null(&mut r, 10, amt);
        items.push(format!("({id}, {cust}, {code}, {grp}, {val}, {amt})"));
    }
    let mut codes = Vec::new();
    for id in 1..=16 {
        // Codes 1 and 2 appear about three times each; 0, 8 and 9 never.
        let code = r.pick(&[1, 1, 2, 2, 3, 4, 5, 6, 7]).to_string();
        let code = or_null(&mut r, 15, code);
        let label = text_lit(r.pick_str(QF_WORDS));
        let label = or_null(&mut r, 20, label);
        let weight = r.range(0, 5).to_string();
        let weight = or_null(&mut r, 15, weight);
        codes.push(format!("({id}, {code}, {label}, {weight})"));
    }
    let mut notes = Vec::new();
    for id in 1..=20 {
        let cust = r.pick(&[1, 2, 3, 8, 9, 600]).to_string();
        let cust = or_null(&mut r, 25, cust);
        let code = r.range(0, 5).to_string();
        let code = or_null(&mut r, 25, code);
        let txt = text_lit(word(&mut r));
        let txt = or_null(&mut r, 20, txt);
        notes.push(format!("({id}, {cust}, {code}, {txt})"));
    }
    vec![
        ("qf_items", items),
        ("qf_codes", codes),
        ("qf_notes", notes),
    ]
}
