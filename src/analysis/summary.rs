//! The per-device result of one analysis pass, as published to the REST
//! API and the metrics.

use serde::Serialize;

use crate::model::Timestamp;

/// What the analyzer concluded about one device at one evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DeviceAnalysis {
    /// The newest sample the analysis saw.
    #[serde(serialize_with = "crate::model::rfc3339::serialize")]
    #[schema(value_type = String, format = DateTime, example = "2026-01-01T00:00:00.000Z")]
    pub at: Timestamp,
    /// Growth of used memory over `trend_window_seconds` (Theil–Sen);
    /// absent with too few samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth_bytes_per_second: Option<f64>,
    /// How well a straight line explains the window, 0–1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth_fit: Option<f64>,
    pub trend_window_seconds: f64,
    /// Free memory divided by the growth rate; only for positive growth
    /// with a good fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_exhaustion_seconds: Option<f64>,
    /// 0 ok, 1 elevated, 2 high, 3 critical.
    pub pressure_level: u8,
    pub pressure: &'static str,
    /// Why the level is what it is.
    pub pressure_reasons: Vec<&'static str>,
    /// Across processes reporting allocator statistics.
    pub allocator_cache_bytes: u64,
    pub allocator_fragmented_bytes: u64,
    /// Processes whose memory grows steadily without returning to baseline.
    pub leaks: Vec<ProcessLeak>,
}

/// A suspected leak, with its evidence.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ProcessLeak {
    pub pid: u32,
    pub slope_bytes_per_second: f64,
    pub fit: f64,
    pub window_seconds: f64,
    pub growth_bytes: u64,
    /// `allocator_allocated` or `nvml_used`: which series grew.
    pub metric: &'static str,
}
