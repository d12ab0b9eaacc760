//! The differential test's schema and its deterministic rows: a family of three tables, a
//! second family, a duplicated and an unsharded table; integers, numeric, unicode text, dates,
//! timestamptz, booleans and NULLs in every column that allows them.

// ---------------------------------------------------------------------------------------------
// Schema

pub(crate) enum Kind {
    /// Family root: `PARTITION BY CONSISTENT HASH (key) PARTITIONS AUTO`.
    Root(&'static str),
    /// Family child: `PARTITION BY REFERENCE (fk)`.
    Child(&'static str),
    Duplicated,
    /// Plain CREATE TABLE through the proxy: one copy, on the first shard.
    Unsharded,
}

pub(crate) struct TableDef {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// Column definitions and constraints, valid in a plain CREATE TABLE.
    pub(crate) body: &'static str,
}

pub(crate) const TABLES: &[TableDef] = &[
    TableDef {
        name: "df_customers",
        kind: Kind::Root("cust_id"),
        body: "cust_id bigint PRIMARY KEY, name text, city text, tier int2, score int4, \
               balance numeric(12,2), rating numeric, active bool, signup date, \
               last_seen timestamptz, region_id int4",
    },
    TableDef {
        name: "df_orders",
        kind: Kind::Child("df_orders_fk"),
        body: "order_id bigint NOT NULL, cust_id bigint NOT NULL, status text, qty int4, \
               amount numeric(12,2), discount numeric, placed_at timestamptz, ship_date date, \
               gift bool, prio int2, \
               CONSTRAINT df_orders_pk PRIMARY KEY (cust_id, order_id), \
               CONSTRAINT df_orders_fk FOREIGN KEY (cust_id) REFERENCES df_customers (cust_id)",
    },
    TableDef {
        name: "df_order_lines",
        kind: Kind::Child("df_lines_fk"),
        body: "line_no int4 NOT NULL, order_id bigint NOT NULL, cust_id bigint NOT NULL, \
               product_id int4, qty int2, price numeric(10,2), note text, \
               CONSTRAINT df_lines_pk PRIMARY KEY (cust_id, order_id, line_no), \
               CONSTRAINT df_lines_fk FOREIGN KEY (cust_id, order_id) \
                 REFERENCES df_orders (cust_id, order_id)",
    },
    TableDef {
        name: "df_accounts",
        kind: Kind::Root("acct_id"),
        body: "acct_id bigint PRIMARY KEY, cust_id bigint, label text, opened date, \
               credit numeric(14,4), flags int4, verified bool, big int8",
    },
    TableDef {
        name: "df_events",
        kind: Kind::Child("df_events_fk"),
        body: "event_id bigint NOT NULL, acct_id bigint NOT NULL, kind text, at timestamptz, \
               value numeric, weight int8, ok bool, small int2, \"Tag\" text, \
               CONSTRAINT df_events_pk PRIMARY KEY (acct_id, event_id), \
               CONSTRAINT df_events_fk FOREIGN KEY (acct_id) REFERENCES df_accounts (acct_id)",
    },
    TableDef {
        name: "df_products",
        kind: Kind::Duplicated,
        body: "product_id int4 PRIMARY KEY, title text, category text, list_price numeric(10,2), \
               discontinued bool, added date, stock int2",
    },
    TableDef {
        name: "df_regions",
        kind: Kind::Unsharded,
        body: "region_id int4 PRIMARY KEY, rname text, country text, tz int2, big int8",
    },
];

pub(crate) fn proxy_ddl(t: &TableDef) -> String {
    match t.kind {
        Kind::Root(key) => format!(
            "CREATE SHARDED TABLE {} ({}) PARTITION BY CONSISTENT HASH ({key}) PARTITIONS AUTO",
            t.name, t.body
        ),
        Kind::Child(fk) => format!(
            "CREATE SHARDED TABLE {} ({}) PARTITION BY REFERENCE ({fk})",
            t.name, t.body
        ),
        Kind::Duplicated => format!("CREATE DUPLICATED TABLE {} ({})", t.name, t.body),
        Kind::Unsharded => format!("CREATE TABLE {} ({})", t.name, t.body),
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic data

/// A 64-bit LCG (Knuth's MMIX constants); the high bits are the output.
pub(crate) struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// 0..n
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// lo..=hi
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    /// True one time in `n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// `value`, or NULL one time in `n`.
pub(crate) fn nullable(r: &mut Lcg, n: u64, value: impl FnOnce(&mut Lcg) -> String) -> String {
    if r.one_in(n) {
        "NULL".into()
    } else {
        value(r)
    }
}

pub(crate) fn text_lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A numeric(p,2) literal in [lo, hi).
pub(crate) fn money(r: &mut Lcg, lo: i64, hi: i64) -> String {
    let cents = r.range(lo * 100, hi * 100 - 1);
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
}

/// An unconstrained numeric with 0..=5 decimals and never a trailing zero, so equal values
/// always have the same text (min/max/DISTINCT of "1.5" and "1.50" would depend on row order).
pub(crate) fn free_numeric(r: &mut Lcg, max_int: i64) -> String {
    let scale = r.below(6) as u32;
    let int = r.range(-max_int, max_int);
    if scale == 0 {
        return int.to_string();
    }
    let mut frac = r.below(10u64.pow(scale));
    if frac.is_multiple_of(10) {
        frac += 1 + r.below(9);
    }
    let sign = if int < 0 || (int == 0 && r.one_in(2)) {
        "-"
    } else {
        ""
    };
    format!(
        "{sign}{}.{:0width$}",
        int.abs(),
        frac,
        width = scale as usize
    )
}

/// Days since 1970-01-01 to (y, m, d) (Howard Hinnant's civil_from_days).
pub(crate) fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

pub(crate) const DAY0_2023: i64 = 19358; // 2023-01-01

pub(crate) fn date_lit(days_since_1970: i64) -> String {
    let (y, m, d) = civil(days_since_1970);
    format!("'{y:04}-{m:02}-{d:02}'")
}

/// A timestamptz in 2023–2024 with an explicit UTC offset.
pub(crate) fn ts_lit(r: &mut Lcg) -> String {
    let secs = r.range(0, 2 * 365 * 86400);
    let (y, m, d) = civil(DAY0_2023 + secs / 86400);
    let s = secs % 86400;
    let micros = if r.one_in(3) {
        format!(".{:06}", r.below(1_000_000))
    } else {
        String::new()
    };
    let offset = r.pick(&["+00", "+02", "-05", "+05:30", "+09"]);
    format!(
        "'{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}{micros}{offset}'",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

pub(crate) fn bool_lit(r: &mut Lcg) -> String {
    if r.one_in(2) { "true" } else { "false" }.into()
}

pub(crate) const WORDS: &[&str] = &[
    "Zürich",
    "東京",
    "😀 smile",
    "",
    "O'Brien",
    "naïve",
    "Ångström",
    "abc",
    "ABC",
    "a b",
    "Москва",
    "São Paulo",
    "zeta",
    "alpha",
    "Beta",
    "_under",
    "123",
    "ß",
    "日本語テキスト",
    "e\u{301}",
    "é",
    "🚀🚀",
    "Zz",
    "aa",
];
pub(crate) const CITIES: &[&str] = &[
    "Zürich",
    "東京",
    "Paris",
    "paris",
    "",
    "New York",
    "São Paulo",
    "Москва",
    "Berlin",
    "🏙 City",
    "Oslo",
    "Lima",
];
pub(crate) const STATUSES: &[&str] = &[
    "new",
    "paid",
    "shipped",
    "cancelled",
    "returned",
    "Shipped",
    "",
];
pub(crate) const KINDS: &[&str] = &[
    "login",
    "logout",
    "purchase",
    "log",
    "view",
    "error",
    "ÉVÉNEMENT",
    "🔔",
];
pub(crate) const CATEGORIES: &[&str] = &["tools", "toys", "food", "Bücher", "家电", ""];

pub(crate) struct Data {
    /// (table, column list, VALUES rows)
    pub(crate) tables: Vec<(&'static str, Vec<String>)>,
}

pub(crate) const CUSTOMERS: i64 = 500;
pub(crate) const ACCOUNTS: i64 = 400;

pub(crate) fn generate() -> Data {
    let mut r = Lcg(0x5eed_d1ff_0012_0005);
    let mut tables = Vec::new();

    let mut regions = Vec::new();
    for id in 1..=12 {
        let rname = nullable(&mut r, 8, |r| text_lit(r.pick(CITIES)));
        let country = nullable(&mut r, 6, |r| {
            text_lit(r.pick(&["CH", "JP", "FR", "US", "BR", "RU", "DE", "Österreich", ""]))
        });
        let tz = nullable(&mut r, 6, |r| r.range(-12, 14).to_string());
        let big = nullable(&mut r, 6, |r| {
            r.range(-9_000_000_000_000, 9_000_000_000_000).to_string()
        });
        regions.push(format!("({id}, {rname}, {country}, {tz}, {big})"));
    }
    tables.push(("df_regions", regions));

    let mut products = Vec::new();
    for id in 1..=60 {
        let title = nullable(&mut r, 10, |r| {
            text_lit(&format!("{} {}", r.pick(WORDS), r.below(100)))
        });
        let category = nullable(&mut r, 8, |r| text_lit(r.pick(CATEGORIES)));
        let price = nullable(&mut r, 9, |r| money(r, 0, 200));
        let disc = nullable(&mut r, 7, bool_lit);
        let added = nullable(&mut r, 7, |r| date_lit(DAY0_2023 - 400 + r.range(0, 700)));
        let stock = nullable(&mut r, 7, |r| r.range(-5, 3000).to_string());
        products.push(format!(
            "({id}, {title}, {category}, {price}, {disc}, {added}, {stock})"
        ));
    }
    tables.push(("df_products", products));

    let mut customers = Vec::new();
    for id in 1..=CUSTOMERS {
        let name = nullable(&mut r, 12, |r| {
            if r.one_in(4) {
                text_lit(r.pick(WORDS))
            } else {
                text_lit(&format!("{} {}", r.pick(WORDS), r.below(1000)))
            }
        });
        let city = nullable(&mut r, 10, |r| text_lit(r.pick(CITIES)));
        let tier = nullable(&mut r, 10, |r| r.range(0, 4).to_string());
        let score = nullable(&mut r, 10, |r| r.range(-1000, 100_000).to_string());
        let balance = nullable(&mut r, 10, |r| money(r, -5000, 50_000));
        let rating = nullable(&mut r, 10, |r| free_numeric(r, 10));
        let active = nullable(&mut r, 10, bool_lit);
        let signup = nullable(&mut r, 10, |r| {
            date_lit(DAY0_2023 - 1000 + r.range(0, 1500))
        });
        let seen = nullable(&mut r, 10, ts_lit);
        let region = nullable(&mut r, 10, |r| r.range(1, 14).to_string());
        customers.push(format!(
            "({id}, {name}, {city}, {tier}, {score}, {balance}, {rating}, {active}, {signup}, \
             {seen}, {region})"
        ));
    }
    tables.push(("df_customers", customers));

    let mut orders = Vec::new();
    let mut lines = Vec::new();
    let mut order_id = 0i64;
    for cust in 1..=CUSTOMERS {
        // Some customers have no orders at all (anti-joins).
        let n = if r.one_in(8) { 0 } else { r.range(1, 6) };
        for _ in 0..n {
            order_id += 1;
            let status = nullable(&mut r, 12, |r| text_lit(r.pick(STATUSES)));
            let qty = nullable(&mut r, 10, |r| r.range(0, 12).to_string());
            let amount = nullable(&mut r, 10, |r| money(r, -50, 1000));
            let discount = nullable(&mut r, 5, |r| free_numeric(r, 3));
            let placed = nullable(&mut r, 10, ts_lit);
            let ship = nullable(&mut r, 6, |r| date_lit(DAY0_2023 + r.range(0, 740)));
            let gift = nullable(&mut r, 8, bool_lit);
            let prio = nullable(&mut r, 8, |r| r.range(1, 9).to_string());
            orders.push(format!(
                "({order_id}, {cust}, {status}, {qty}, {amount}, {discount}, {placed}, {ship}, \
                 {gift}, {prio})"
            ));
            let nl = if r.one_in(6) { 0 } else { r.range(1, 4) };
            for line_no in 1..=nl {
                let product = nullable(&mut r, 15, |r| r.range(1, 65).to_string());
                let qty = nullable(&mut r, 10, |r| r.range(1, 10).to_string());
                let price = nullable(&mut r, 10, |r| money(r, 0, 300));
                let note = nullable(&mut r, 3, |r| text_lit(r.pick(WORDS)));
                lines.push(format!(
                    "({line_no}, {order_id}, {cust}, {product}, {qty}, {price}, {note})"
                ));
            }
        }
    }
    tables.push(("df_orders", orders));
    tables.push(("df_order_lines", lines));

    let mut accounts = Vec::new();
    let mut events = Vec::new();
    let mut event_id = 0i64;
    for i in 1..=ACCOUNTS {
        let acct = 1000 + i;
        let cust = nullable(&mut r, 8, |r| r.range(1, CUSTOMERS + 30).to_string());
        let label = nullable(&mut r, 8, |r| text_lit(r.pick(WORDS)));
        let opened = nullable(&mut r, 8, |r| date_lit(DAY0_2023 - 200 + r.range(0, 900)));
        let credit = nullable(&mut r, 8, |r| {
            let v = r.range(-100_000_000, 9_999_999_999);
            format!(
                "{}{}.{:04}",
                if v < 0 { "-" } else { "" },
                v.abs() / 10_000,
                v.abs() % 10_000
            )
        });
        let flags = nullable(&mut r, 8, |r| r.range(0, 255).to_string());
        let verified = nullable(&mut r, 8, bool_lit);
        let big = nullable(&mut r, 8, |r| {
            r.range(-4_000_000_000_000_000, 4_000_000_000_000_000)
                .to_string()
        });
        accounts.push(format!(
            "({acct}, {cust}, {label}, {opened}, {credit}, {flags}, {verified}, {big})"
        ));
        let n = if r.one_in(10) { 0 } else { r.range(1, 9) };
        for _ in 0..n {
            event_id += 1;
            let kind = nullable(&mut r, 10, |r| text_lit(r.pick(KINDS)));
            let at = nullable(&mut r, 10, ts_lit);
            let value = nullable(&mut r, 8, |r| free_numeric(r, 100_000));
            let weight = nullable(&mut r, 8, |r| {
                r.range(-1_000_000_000_000, 1_000_000_000_000).to_string()
            });
            let ok = nullable(&mut r, 8, bool_lit);
            let small = nullable(&mut r, 8, |r| r.range(-32768, 32767).to_string());
            let tag = nullable(&mut r, 2, |r| {
                text_lit(r.pick(&["Ö", "o", "O", "ö", "tag"]))
            });
            events.push(format!(
                "({event_id}, {acct}, {kind}, {at}, {value}, {weight}, {ok}, {small}, {tag})"
            ));
        }
    }
    tables.push(("df_accounts", accounts));
    tables.push(("df_events", events));
    Data { tables }
}
