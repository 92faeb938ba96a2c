//! What `vramd probe --json` prints: one JSON document, a reading or a
//! failure, that the daemon reads back.
//!
//! ```json
//! {"version":1,"device":"GPU-…","reading":{…}}
//! {"version":1,"device":"GPU-…","failure":{"kind":"init_failed","message":"…"}}
//! ```

use serde::{Deserialize, Serialize};

use crate::model::{ProbeFailure, ProbeFailureKind, ProbeReading};

/// Version of the document; the daemon refuses others (its own child
/// always matches, so a mismatch means a stale binary on disk).
pub const WIRE_VERSION: u32 = 1;

/// The probe child's answer.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeAnswer {
    pub version: u32,
    pub device: String,
    pub reading: Option<ProbeReading>,
    pub failure: Option<ProbeFailure>,
}

impl ProbeAnswer {
    pub fn new(device: &str, result: Result<ProbeReading, ProbeFailure>) -> Self {
        let (reading, failure) = (result.as_ref().ok().cloned(), result.err());
        Self { version: WIRE_VERSION, device: device.to_owned(), reading, failure }
    }

    /// Reads an answer for `device`; anything else is a `bad_output`
    /// failure naming what was wrong.
    pub fn parse(text: &[u8], device: &str) -> Result<ProbeReading, ProbeFailure> {
        let bad = |reason: String| ProbeFailure::new(ProbeFailureKind::BadOutput, reason);
        let answer: ProbeAnswer = serde_json::from_slice(text)
            .map_err(|error| bad(format!("the probe's answer is not valid JSON: {error}")))?;
        if answer.version != WIRE_VERSION {
            return Err(bad(format!(
                "the probe answered version {}, this daemon reads {WIRE_VERSION} (is the binary on disk a different vramd?)",
                answer.version
            )));
        }
        if !answer.device.eq_ignore_ascii_case(device) {
            return Err(bad(format!(
                "asked about {device}, the probe answered about {}",
                answer.device
            )));
        }
        match (answer.reading, answer.failure) {
            (Some(reading), None) => Ok(reading),
            (None, Some(failure)) => Err(failure),
            _ => Err(bad("the probe's answer has neither or both of reading and failure".into())),
        }
    }

    /// Exit status of `vramd probe` for this answer: 0 measured, 4 the
    /// CUDA driver library or a symbol is missing, 5 any other failure.
    pub fn exit_status(&self) -> u8 {
        match self.failure.as_ref().map(|failure| failure.kind) {
            None => 0,
            Some(ProbeFailureKind::LibraryMissing | ProbeFailureKind::SymbolMissing) => 4,
            Some(_) => 5,
        }
    }
}

/// `vramd probe` without `--json`: one line per measurement.
pub fn render_text(answer: &ProbeAnswer) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    const GIB: f64 = (1u64 << 30) as f64;
    let gib = |bytes: u64| format!("{:.2} GiB", bytes as f64 / GIB);
    let micros = |seconds: f64| format!("{:.0} µs", seconds * 1e6);
    let mut lines = vec![format!("device            {}", answer.device)];
    if let Some(failure) = &answer.failure {
        lines.push(format!("probe failed      {}: {}", failure.kind.as_str(), failure.message));
    }
    if let Some(reading) = &answer.reading {
        lines.push(format!(
            "CUDA free         {} of {}",
            gib(reading.cuda_free_bytes),
            gib(reading.cuda_total_bytes)
        ));
        match (reading.nvml_free_bytes, reading.free_difference_bytes()) {
            (Some(nvml), Some(difference)) => lines.push(format!(
                "NVML free         {} (NVML - CUDA: {:+.0} MiB)",
                gib(nvml),
                difference as f64 / MIB
            )),
            _ => lines.push("NVML free         unknown (NVML unavailable to the probe)".to_owned()),
        }
        let context = reading.context_bytes.map_or_else(
            || "size unknown".to_owned(),
            |bytes| format!("{:.0} MiB", bytes as f64 / MIB),
        );
        lines.push(format!(
            "context           created in {:.0} ms, {context}",
            reading.context_create_seconds * 1e3
        ));
        let block = format!("{:.0} MiB", reading.alloc_block_bytes as f64 / MIB);
        match (reading.alloc_latency_seconds, reading.free_latency_seconds) {
            (Some(alloc), Some(free)) => lines.push(format!(
                "alloc {block:<11} median {} (free {}), {} samples",
                micros(alloc),
                micros(free),
                reading.alloc_samples
            )),
            _ => lines.push(format!(
                "alloc {block:<11} not timed: the block does not fit above the margin"
            )),
        }
        if let Some(search) = &reading.headroom {
            lines.push(format!(
                "largest block     {} ({}, {} attempts in {:.2} s, margin {})",
                gib(search.largest_block_bytes),
                <&str>::from(search.stopped),
                search.attempts,
                search.seconds,
                gib(search.margin_bytes)
            ));
        }
        lines.push(format!("probe took        {:.2} s", reading.duration_seconds));
    }
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    fn reading() -> ProbeReading {
        ProbeReading {
            at: Timestamp::from_unix_millis(1_767_225_600_000),
            cuda_free_bytes: 1,
            cuda_total_bytes: 2,
            nvml_free_bytes: None,
            context_create_seconds: 0.1,
            context_bytes: None,
            alloc_block_bytes: 64,
            alloc_latency_seconds: None,
            free_latency_seconds: None,
            alloc_samples: 0,
            headroom: None,
            duration_seconds: 0.2,
        }
    }

    #[test]
    fn probe_answers_round_trip_and_carry_their_exit_status() {
        let ok = ProbeAnswer::new("GPU-a", Ok(reading()));
        let text = serde_json::to_vec(&ok).unwrap();
        assert_eq!(ProbeAnswer::parse(&text, "gpu-A"), Ok(reading()));
        assert_eq!(ok.exit_status(), 0);
        for (kind, status) in [
            (ProbeFailureKind::LibraryMissing, 4),
            (ProbeFailureKind::SymbolMissing, 4),
            (ProbeFailureKind::InitFailed, 5),
            (ProbeFailureKind::AllocFailed, 5),
        ] {
            let failed = ProbeAnswer::new("GPU-a", Err(ProbeFailure::new(kind, "why")));
            assert_eq!(failed.exit_status(), status, "{kind:?}");
            let text = serde_json::to_string(&failed).unwrap();
            assert!(text.contains(&format!("\"kind\":\"{}\"", kind.as_str())), "{text}");
            assert_eq!(
                ProbeAnswer::parse(text.as_bytes(), "GPU-a"),
                Err(ProbeFailure::new(kind, "why"))
            );
        }
    }

    #[test]
    fn probe_text_names_every_measurement_or_the_failure() {
        let mut measured = reading();
        measured.nvml_free_bytes = Some(1 + (2 << 20));
        measured.alloc_latency_seconds = Some(95e-6);
        measured.free_latency_seconds = Some(40e-6);
        measured.alloc_samples = 5;
        let text = render_text(&ProbeAnswer::new("GPU-a", Ok(measured)));
        for needle in [
            "GPU-a",
            "CUDA free",
            "NVML - CUDA: +2 MiB",
            "created in 100 ms",
            "median 95 µs",
            "5 samples",
            "probe took",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
        let failed = ProbeAnswer::new(
            "GPU-a",
            Err(ProbeFailure::new(ProbeFailureKind::InitFailed, "cuInit failed")),
        );
        assert!(render_text(&failed).contains("probe failed      init_failed: cuInit failed"));
    }

    #[test]
    fn probe_answers_that_cannot_be_trusted_are_bad_output() {
        let other = serde_json::to_vec(&ProbeAnswer::new("GPU-b", Ok(reading()))).unwrap();
        let mut future = ProbeAnswer::new("GPU-a", Ok(reading()));
        future.version = 2;
        let future = serde_json::to_vec(&future).unwrap();
        for text in [
            &b"Segmentation fault"[..],
            b"",
            b"{\"version\":1,\"device\":\"GPU-a\"}",
            &other,
            &future,
        ] {
            let error = ProbeAnswer::parse(text, "GPU-a").unwrap_err();
            assert_eq!(
                error.kind,
                ProbeFailureKind::BadOutput,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }
}
