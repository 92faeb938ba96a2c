//! What the CUDA driver probe measures, and why a probe produced nothing.
//!
//! These types are both the probe child's JSON answer (`vramd probe
//! --json`) and what history keeps, so their serde form is a wire format:
//! fields are only ever added, as optional.

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

use super::Timestamp;

/// One successful probe of one device: what the CUDA driver itself says,
/// measured from a short-lived context in a child process.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeReading {
    /// When `cuMemGetInfo` was read.
    #[serde(with = "super::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// Free memory per `cuMemGetInfo`, with the probe's own context alive.
    pub cuda_free_bytes: u64,
    pub cuda_total_bytes: u64,
    /// NVML's free memory (memory info v2) read right after
    /// `cuMemGetInfo`, by the same process: the two differ only by what
    /// the driver counts differently, not by time.
    pub nvml_free_bytes: Option<u64>,
    /// Time `cuCtxCreate` took.
    pub context_create_seconds: f64,
    /// GPU memory the probe's own context took: its NVML process entry
    /// when the probe can see its own PID, else NVML used during minus
    /// before (approximate when other processes allocate meanwhile).
    pub context_bytes: Option<u64>,
    /// Size of the block whose allocation and release are timed.
    pub alloc_block_bytes: u64,
    /// Median time of `cuMemAlloc` of the block; absent when the block did
    /// not fit above the safety margin.
    pub alloc_latency_seconds: Option<f64>,
    /// Median time of `cuMemFree` of the block.
    pub free_latency_seconds: Option<f64>,
    /// Allocation and release pairs timed.
    pub alloc_samples: u32,
    /// The largest-block search, when it was asked for (`--headroom`).
    pub headroom: Option<HeadroomSearch>,
    /// Time the whole probe took, from loading the library to releasing
    /// the context.
    pub duration_seconds: f64,
}

impl ProbeReading {
    /// NVML free minus CUDA free; positive when NVML sees more free memory
    /// than CUDA can use.
    pub fn free_difference_bytes(&self) -> Option<i64> {
        let difference = i128::from(self.nvml_free_bytes?) - i128::from(self.cuda_free_bytes);
        Some(difference.clamp(i64::MIN.into(), i64::MAX.into()) as i64)
    }

    /// The largest block the search could allocate.
    pub fn headroom_bytes(&self) -> Option<u64> {
        self.headroom.as_ref().map(|search| search.largest_block_bytes)
    }
}

/// The bounded search for the largest block the driver will allocate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeadroomSearch {
    /// Largest block allocated (and released at once); 0 when nothing fit
    /// above the margin.
    pub largest_block_bytes: u64,
    /// Free memory the search never went below.
    pub margin_bytes: u64,
    /// Allocation attempts made.
    pub attempts: u32,
    pub stopped: HeadroomStop,
    pub seconds: f64,
}

/// Why the headroom search stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum HeadroomStop {
    /// Bounds met within the search's granularity: the answer is exact to
    /// that granularity.
    Converged,
    /// The largest size the margin allows was allocated, so the true
    /// headroom may be larger but was not tried.
    Margin,
    /// The time budget ran out: the answer is a lower bound.
    TimeBudget,
    /// The attempt limit was reached: the answer is a lower bound.
    MaxAttempts,
}

/// Why a probe produced no reading, as counted in
/// `vramd_probe_failures_total{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum ProbeFailureKind {
    /// `libcuda.so.1` (or `probe.cuda_library`) cannot be loaded.
    LibraryMissing,
    /// The library lacks a symbol the probe needs.
    SymbolMissing,
    /// `cuInit` failed.
    InitFailed,
    /// No CUDA device has the monitored device's UUID.
    DeviceNotFound,
    /// Creating the context or reading memory in it failed.
    ContextFailed,
    /// Allocating or releasing memory failed other than by running out
    /// (running out during the headroom search is the search's answer).
    AllocFailed,
    /// The child was killed at `probe.timeout`.
    Timeout,
    /// The child died by a signal or exited without an answer.
    Crashed,
    /// The child's answer could not be read.
    BadOutput,
    /// The child could not be started.
    SpawnFailed,
    /// A replayed trace has no more probe records for the device.
    TraceEnded,
}

impl ProbeFailureKind {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;

    /// Index into [`Self::ALL`] (declaration order).
    pub fn position(self) -> usize {
        self as usize
    }
}

/// A probe that produced no reading: which kind of failure, and the
/// message that explains it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}: {message}", kind.as_str())]
pub struct ProbeFailure {
    pub kind: ProbeFailureKind,
    pub message: String,
}

impl ProbeFailure {
    pub fn new(kind: ProbeFailureKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

/// Why the daemon did not probe a device when its turn came, as counted
/// in `vramd_probe_skipped_total{reason}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum ProbeSkipReason {
    /// NVML free memory is below `probe.min_free`: a context could push a
    /// workload into OOM.
    LowFree,
    /// The device is in exclusive-process (or prohibited) compute mode: a
    /// context would lock the workload out.
    ExclusiveProcess,
    /// An out-of-memory or allocator-retry alert is firing on the device.
    AlertFiring,
    /// No fresh NVML memory reading to check the floor against.
    NoReading,
}

impl ProbeSkipReason {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;

    /// Index into [`Self::ALL`] (declaration order).
    pub fn position(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading() -> ProbeReading {
        ProbeReading {
            at: Timestamp::from_unix_millis(1_700_000_000_000),
            cuda_free_bytes: 10 << 30,
            cuda_total_bytes: 80 << 30,
            nvml_free_bytes: Some((10 << 30) + (2 << 20)),
            context_create_seconds: 0.25,
            context_bytes: Some(500 << 20),
            alloc_block_bytes: 64 << 20,
            alloc_latency_seconds: Some(0.0001),
            free_latency_seconds: Some(0.00005),
            alloc_samples: 5,
            headroom: Some(HeadroomSearch {
                largest_block_bytes: 8 << 30,
                margin_bytes: 1 << 30,
                attempts: 12,
                stopped: HeadroomStop::Converged,
                seconds: 0.1,
            }),
            duration_seconds: 0.6,
        }
    }

    #[test]
    fn probe_reading_round_trips_through_json_with_rfc3339_time() {
        let reading = reading();
        let text = serde_json::to_string(&reading).unwrap();
        assert!(text.contains("\"at\":\"2023-11-14T22:13:20"), "{text}");
        assert!(text.contains("\"stopped\":\"converged\""), "{text}");
        assert_eq!(serde_json::from_str::<ProbeReading>(&text).unwrap(), reading);
    }

    #[test]
    fn probe_reading_leaves_absent_values_out_and_refuses_unknown_fields() {
        let reading = ProbeReading { nvml_free_bytes: None, headroom: None, ..reading() };
        let text = serde_json::to_string(&reading).unwrap();
        assert!(!text.contains("nvml_free_bytes") && !text.contains("headroom"), "{text}");
        assert_eq!(reading.free_difference_bytes(), None);
        assert_eq!(reading.headroom_bytes(), None);
        let extra = text.replacen('{', "{\"surprise\":1,", 1);
        assert!(serde_json::from_str::<ProbeReading>(&extra).is_err());
    }

    #[test]
    fn free_difference_is_nvml_minus_cuda_and_may_be_negative() {
        assert_eq!(reading().free_difference_bytes(), Some(2 << 20));
        let cuda_sees_more = ProbeReading { nvml_free_bytes: Some(9 << 30), ..reading() };
        assert_eq!(cuda_sees_more.free_difference_bytes(), Some(-(1 << 30)));
        assert_eq!(reading().headroom_bytes(), Some(8 << 30));
    }

    #[test]
    fn failure_kinds_and_skip_reasons_have_distinct_labels_matching_serde() {
        for (position, kind) in ProbeFailureKind::ALL.iter().enumerate() {
            assert_eq!(kind.position(), position);
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
        for (position, reason) in ProbeSkipReason::ALL.iter().enumerate() {
            assert_eq!(reason.position(), position);
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
        for stop in [
            HeadroomStop::Converged,
            HeadroomStop::Margin,
            HeadroomStop::TimeBudget,
            HeadroomStop::MaxAttempts,
        ] {
            assert_eq!(serde_json::to_value(stop).unwrap(), <&str>::from(stop));
        }
        let failure = ProbeFailure::new(ProbeFailureKind::Timeout, "killed after 60s");
        assert_eq!(failure.to_string(), "timeout: killed after 60s");
    }
}
