//! The generator's random numbers: xorshift64* seeded through splitmix64, so a (seed, query
//! index) pair gives the same query on every machine and every build.

/// splitmix64's finaliser: spreads every input bit over the output.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let s = mix(seed);
        Rng(if s == 0 { 0x2545_f491_4f6c_dd1d } else { s })
    }

    /// The generator of query `index` of run `seed`: independent of every other index.
    pub fn for_query(seed: u64, index: u64) -> Rng {
        Rng::new(mix(seed) ^ mix(index.wrapping_mul(0x9e37_79b9).wrapping_add(1)))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 11) % n as u64) as usize
    }

    /// lo..=hi
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + ((self.next_u64() >> 11) % (hi - lo + 1) as u64) as i64
    }

    /// True `pct` times in 100.
    pub fn chance(&mut self, pct: u32) -> bool {
        self.below(100) < pct as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub fn pick_str(&mut self, items: &[&'static str]) -> &'static str {
        items[self.below(items.len())]
    }

    /// An index into `weights`, each chosen in proportion to its weight (some weight > 0).
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut x = self.below(total as usize) as u32;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        unreachable!("weights sum to {total}")
    }
}
