//! Bob Jenkins' lookup3 as PostgreSQL uses it (`src/common/hashfn.c`), in its 64-bit seeded
//! form. The byte order is fixed to little-endian: PostgreSQL reads whole words in native order,
//! and every supported server platform (x86-64, aarch64) is little-endian.

/// `HASH_PARTITION_SEED` from PostgreSQL's `catalog/partition.h`.
pub const HASH_PARTITION_SEED: u64 = 0x7A5B_2236_7996_DCFD;

const GOLDEN: u32 = 0x9e37_79b9;
/// PostgreSQL adds this odd constant to the initial state; it has no deeper meaning.
const INIT_EXTRA: u32 = 3_923_095;

struct State {
    a: u32,
    b: u32,
    c: u32,
}

impl State {
    fn new(len: u32, seed: u64) -> State {
        let init = GOLDEN.wrapping_add(len).wrapping_add(INIT_EXTRA);
        let mut s = State {
            a: init,
            b: init,
            c: init,
        };
        // A zero seed leaves the state untouched so seeded and unseeded hashes agree.
        if seed != 0 {
            s.a = s.a.wrapping_add((seed >> 32) as u32);
            s.b = s.b.wrapping_add(seed as u32);
            s.mix();
        }
        s
    }

    fn mix(&mut self) {
        let State { a, b, c } = self;
        *a = a.wrapping_sub(*c);
        *a ^= c.rotate_left(4);
        *c = c.wrapping_add(*b);
        *b = b.wrapping_sub(*a);
        *b ^= a.rotate_left(6);
        *a = a.wrapping_add(*c);
        *c = c.wrapping_sub(*b);
        *c ^= b.rotate_left(8);
        *b = b.wrapping_add(*a);
        *a = a.wrapping_sub(*c);
        *a ^= c.rotate_left(16);
        *c = c.wrapping_add(*b);
        *b = b.wrapping_sub(*a);
        *b ^= a.rotate_left(19);
        *a = a.wrapping_add(*c);
        *c = c.wrapping_sub(*b);
        *c ^= b.rotate_left(4);
        *b = b.wrapping_add(*a);
    }

    fn finish(mut self) -> u64 {
        let State { a, b, c } = &mut self;
        *c ^= *b;
        *c = c.wrapping_sub(b.rotate_left(14));
        *a ^= *c;
        *a = a.wrapping_sub(c.rotate_left(11));
        *b ^= *a;
        *b = b.wrapping_sub(a.rotate_left(25));
        *c ^= *b;
        *c = c.wrapping_sub(b.rotate_left(16));
        *a ^= *c;
        *a = a.wrapping_sub(c.rotate_left(4));
        *b ^= *a;
        *b = b.wrapping_sub(a.rotate_left(14));
        *c ^= *b;
        *c = c.wrapping_sub(b.rotate_left(24));
        (u64::from(*b) << 32) | u64::from(*c)
    }
}

fn word(bytes: &[u8]) -> u32 {
    // Short tails are zero-padded, which is what lookup3's fall-through switch amounts to.
    let mut w = [0u8; 4];
    w[..bytes.len()].copy_from_slice(bytes);
    u32::from_le_bytes(w)
}

/// PostgreSQL's `hash_bytes_extended()` (`hash_any_extended`).
pub fn hash_bytes_extended(key: &[u8], seed: u64) -> u64 {
    // PostgreSQL takes the length as a C int; datums are far below 2^31 bytes.
    let mut s = State::new(key.len() as u32, seed);
    let mut rest = key;
    while rest.len() >= 12 {
        s.a = s.a.wrapping_add(word(&rest[0..4]));
        s.b = s.b.wrapping_add(word(&rest[4..8]));
        s.c = s.c.wrapping_add(word(&rest[8..12]));
        s.mix();
        rest = &rest[12..];
    }
    let n = rest.len();
    s.a = s.a.wrapping_add(word(&rest[..n.min(4)]));
    if n > 4 {
        s.b = s.b.wrapping_add(word(&rest[4..n.min(8)]));
    }
    if n > 8 {
        // The lowest byte of c is reserved for the length, so the last bytes go in shifted.
        s.c = s.c.wrapping_add(word(&rest[8..n]) << 8);
    }
    s.finish()
}

/// PostgreSQL's `hash_bytes_uint32_extended()` (`hash_uint32_extended`).
pub fn hash_uint32_extended(k: u32, seed: u64) -> u64 {
    let mut s = State::new(4, seed);
    s.a = s.a.wrapping_add(k);
    s.finish()
}

/// PostgreSQL's `hash_combine64()` from `common/hashfn.h`.
pub fn hash_combine64(a: u64, b: u64) -> u64 {
    a ^ b
        .wrapping_add(0x49a0_f4dd_15e5_a8e3)
        .wrapping_add(a << 54)
        .wrapping_add(a >> 7)
}

/// `hashint8extended` (and, through it, `hashint4extended` and `hashint2extended`): an int8 folds its high half into the low half so that values inside
/// the int4 range hash exactly like the int4 (cross-type hash joins depend on that).
pub fn hash_int8(v: i64, seed: u64) -> u64 {
    let lo = v as u32;
    let hi = (v >> 32) as u32;
    let folded = if v >= 0 { lo ^ hi } else { lo ^ !hi };
    hash_uint32_extended(folded, seed)
}

/// `hashfloat8extended`; `hashfloat4extended` widens to float8 first.
pub fn hash_float8(v: f64, seed: u64) -> u64 {
    // -0 equals +0 and all NaNs are equal, so they must hash alike.
    if v == 0.0 {
        return seed;
    }
    let canonical = if v.is_nan() { f64::NAN } else { v };
    hash_bytes_extended(&canonical.to_bits().to_le_bytes(), seed)
}
