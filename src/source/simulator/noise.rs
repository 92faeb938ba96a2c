//! Deterministic, stateless noise for the simulator.
//!
//! Owns: a SplitMix64-based hash of `(seed, stream, device, step, …)` and the
//! helpers that turn it into numbers. Depends on nothing (not even `model`).
//! Public, as far as the detection corpus (`crates/corpus`) needs it: the
//! streams, the hash and its uniform draws.
//!
//! Noise is a *hash* of its coordinates rather than the output of a stateful
//! generator, so a reading depends only on the spec, the device and the time:
//! the same question always gets the same answer, whatever was asked before.

/// What a piece of noise is for. Each stream hashes independently, so e.g.
/// utilization noise cannot accidentally correlate with memory noise; the
/// discriminant is the stream's tag in the hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Uuid = 0x5555_4944,
    Pid = 0x5049_4400,
    Context = 0x4354_5800,
    Allocated = 0x414c_4c4f,
    Reserved = 0x5245_5356,
    Retries = 0x5254_5259,
    Unattributed = 0x554e_4154,
    GpuUtilization = 0x5554_494c,
    BandwidthUtilization = 0x4257_5554,
    Temperature = 0x5445_4d50,
    Power = 0x504f_5752,
    TenantCount = 0x5445_4e54,
    Probe = 0x5052_4f42,
    /// The detection corpus's draws (`crates/corpus`).
    Corpus = 0x434f_5250,
}

/// One SplitMix64 output step: a bijective, well-mixed function of `state`.
pub(super) fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash of the seed, the stream and any further coordinates.
pub fn hash(seed: u64, stream: Stream, coordinates: &[u64]) -> u64 {
    // Chaining through splitmix64 (rather than XOR-ing the parts) keeps the
    // order of coordinates significant: (1, 2) and (2, 1) differ.
    let mut state = splitmix64(seed ^ splitmix64(stream as u64));
    for &coordinate in coordinates {
        state = splitmix64(state ^ coordinate);
    }
    state
}

/// Uniform in `[0, 1)`.
pub fn unit(seed: u64, stream: Stream, coordinates: &[u64]) -> f64 {
    // The top 53 bits fill an f64 mantissa exactly, so every value is exact.
    (hash(seed, stream, coordinates) >> 11) as f64 / (1u64 << 53) as f64
}

/// Uniform in `[-1, 1)`.
pub fn symmetric(seed: u64, stream: Stream, coordinates: &[u64]) -> f64 {
    unit(seed, stream, coordinates) * 2.0 - 1.0
}

/// Scales `bytes` by a fraction in `[0, 1]`; out-of-range fractions clamp.
pub(super) fn fraction_of(bytes: u64, fraction: f64) -> u64 {
    let fraction = if fraction.is_finite() { fraction.clamp(0.0, 1.0) } else { 0.0 };
    // f64 holds byte counts of GPU memory (< 2^53) exactly enough for noise.
    (bytes as f64 * fraction) as u64
}

/// `base` moved by `amplitude × s` for `s` in `[-1, 1)`, never below zero.
pub(super) fn jitter(base: u64, amplitude: u64, s: f64) -> u64 {
    let delta = fraction_of(amplitude, s.abs());
    if s < 0.0 { base.saturating_sub(delta) } else { base.saturating_add(delta) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // Reference values for seed 0 from the published SplitMix64 generator
        // (state advanced by the golden gamma before each output).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn hash_depends_on_every_input_and_their_order() {
        let base = hash(1, Stream::Allocated, &[2, 3]);
        assert_eq!(base, hash(1, Stream::Allocated, &[2, 3]));
        assert_ne!(base, hash(2, Stream::Allocated, &[2, 3]));
        assert_ne!(base, hash(1, Stream::Reserved, &[2, 3]));
        assert_ne!(base, hash(1, Stream::Allocated, &[3, 2]));
        assert_ne!(base, hash(1, Stream::Allocated, &[2, 4]));
    }

    #[test]
    fn unit_and_symmetric_stay_in_range_and_spread() {
        let values: Vec<f64> = (0..10_000).map(|step| unit(7, Stream::Power, &[step])).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        assert!((0..1_000).all(|step| {
            let s = symmetric(7, Stream::Power, &[step]);
            (-1.0..1.0).contains(&s)
        }));
    }

    #[test]
    fn jitter_never_underflows() {
        assert_eq!(jitter(10, 100, -0.5), 0);
        assert_eq!(jitter(100, 10, 0.5), 105);
        assert_eq!(fraction_of(100, f64::NAN), 0);
        assert_eq!(fraction_of(100, 2.0), 100);
    }
}
