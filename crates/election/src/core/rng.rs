//! A tiny deterministic generator for jitter (splitmix64): the core needs
//! randomness that a seed can replay, and nothing cryptographic.

use std::time::Duration;

#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `base × f` with `f` uniform in `[lo, hi)`.
    pub(crate) fn scale(&mut self, base: Duration, lo: f64, hi: f64) -> Duration {
        let f = lo + (hi - lo) * self.unit();
        Duration::try_from_secs_f64(base.as_secs_f64() * f).unwrap_or(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_stays_in_range_and_is_reproducible() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let base = Duration::from_secs(2);
        for _ in 0..1000 {
            let x = a.scale(base, 1.0, 2.2);
            assert_eq!(x, b.scale(base, 1.0, 2.2));
            assert!(x >= base && x < base.mul_f64(2.2), "{x:?}");
        }
    }
}
