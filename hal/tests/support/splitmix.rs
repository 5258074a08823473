//! The seedable generator the randomized stress tests share (`hal/tests/semaphore_stress.rs`,
//! `driver-cpu-sim/tests/dag_stress.rs`), included with `#[path]`: a failure prints its seed, and the
//! same seed replays the same operations.

#![allow(dead_code)]

/// splitmix64: small, fast, and good enough to pick operations.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// A generator for thread `stream`, independent of the others.
    pub fn fork(seed: u64, stream: u64) -> Rng {
        let mut rng = Rng(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        rng.next();
        rng
    }
}
