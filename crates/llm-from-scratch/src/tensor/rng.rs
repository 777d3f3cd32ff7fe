//! [`SplitMix64`]: a tiny, fast, reproducible generator (Steele, Lea and Flood's SplitMix), and
//! [`Tensor::uniform`], a tensor of its draws.
//!
//! It sits with the tensors, below the tape, because everything above draws from it: dropout on
//! the tape, gradient checks, the layers' initial weights and the demos' inputs.

use crate::error::TensorAutodiffError;
use crate::tensor::Tensor;

/// A 64-bit generator whose whole state is one counter; the same seed gives the same stream on
/// every machine. `Clone` makes a *trial copy*: constructors draw from a copy and write it back
/// only when they succeed, so a failed constructor leaves the caller's generator untouched.
///
/// ```
/// use llm_from_scratch::nn::SplitMix64; // also `llm_from_scratch::tensor::SplitMix64`
/// let mut a = SplitMix64::new(42);
/// let mut b = SplitMix64::new(42);
/// assert_eq!(a.next_u64(), b.next_u64());
/// let u = a.next_f64();
/// assert!((0.0..1.0).contains(&u));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits: advance by the golden-ratio increment, then mix.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform number in `[low, high)`.
    pub fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.next_f64()
    }

    /// A standard normal number (Box–Muller; uses two uniforms).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // in (0, 1]: ln is finite
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A uniform index in `0..n`, by rejection so that every index is equally likely (0 for `n = 0`,
    /// drawing nothing).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0; // an empty range has no index; 0 is returned and nothing is drawn
        }
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }
}

impl Tensor {
    /// A tensor of `shape` whose values are drawn from `rng` uniformly in `[low, high)`, in
    /// row-major order.
    ///
    /// ```
    /// use llm_from_scratch::{Tensor, nn::SplitMix64};
    /// let x = Tensor::uniform(&[2, 3], -1.0, 1.0, &mut SplitMix64::new(7))?;
    /// assert_eq!(x.shape(), &[2, 3]);
    /// assert!(x.as_slice().iter().all(|v| (-1.0..1.0).contains(v)));
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeOverflow`] when the shape holds more than
    /// [`crate::tensor::MAX_ELEMENTS`] values; nothing is drawn then.
    pub fn uniform(shape: &[usize], low: f64, high: f64, rng: &mut SplitMix64) -> Result<Tensor, TensorAutodiffError> {
        let len = crate::tensor::dense::element_count("uniform tensor", shape)?;
        Ok(Tensor::from_parts(shape.to_vec(), (0..len).map(|_| rng.uniform(low, high)).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_first_outputs() {
        // SplitMix64 seeded with 0 starts 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4 (published values).
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn uniform_and_normal_stay_in_range() {
        let mut rng = SplitMix64::new(9);
        let xs: Vec<f64> = (0..10_000).map(|_| rng.uniform(-2.0, 3.0)).collect();
        assert!(xs.iter().all(|x| (-2.0..3.0).contains(x)));
        let mean = (0..10_000).map(|_| rng.normal()).sum::<f64>() / 10_000.0;
        assert!(mean.abs() < 0.05, "{mean}");
        assert!((0..1000).all(|_| rng.below(7) < 7));
    }
}
