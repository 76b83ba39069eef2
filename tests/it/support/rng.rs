//! A small random generator (xorshift64*) for the tests that pick kill moments and workloads
//! at random: reproducible from a seed, and no dependency.

/// See the module docs.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator that repeats its sequence for the same `seed`.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// A generator seeded from the clock and the process id, different every run.
    pub(crate) fn seeded() -> Rng {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Rng::new((t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A number in `lo..hi`.
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }
}
