//! The rules over the CUDA driver probe: NVML and CUDA disagreeing about
//! free memory, and too little allocatable headroom for the job size.
//! Both judge the device's latest successful probe.

use super::RulesConfig;
use crate::model::{DeviceInfo, ProbeReading, RuleId};

use super::rules::{Draft, MIB, Observations, gib};

fn mib(bytes: f64) -> String {
    format!("{:.0} MiB", bytes / MIB)
}

pub(super) fn observe(
    rules: &RulesConfig,
    device: &DeviceInfo,
    name: &str,
    reading: &ProbeReading,
    out: &mut Observations<'_>,
) {
    if let (Some(difference), Some(nvml_free)) =
        (reading.free_difference_bytes(), reading.nvml_free_bytes)
    {
        let magnitude = difference.unsigned_abs() as f64;
        out.judge(Draft {
            device,
            rule: RuleId::ProbeFreeMismatch,
            config: &rules.probe_free_mismatch,
            process: None,
            value: magnitude,
            text: &|| {
                let (more, less) =
                    if difference > 0 { ("NVML", "CUDA") } else { ("CUDA", "NVML") };
                (
                    format!(
                        "{name}: NVML and CUDA disagree about free memory by {}",
                        mib(magnitude)
                    ),
                    format!(
                        "At the CUDA probe of {}, NVML reported {} free and cuMemGetInfo {} free: {more} sees {} more than {less}. Capacity planning on NVML's number would be off by that much.",
                        reading.at.to_rfc3339(),
                        gib(nvml_free),
                        gib(reading.cuda_free_bytes),
                        mib(magnitude),
                    ),
                )
            },
            remediation: "trust cuMemGetInfo (vramd_probe_cuda_free_bytes) for what a job can allocate; look for memory NVML does not attribute (MIG or vGPU limits, a CUDA MPS server, processes in other containers), compare nvidia-smi with the probe, and report persistent gaps with the driver version",
        });
    }
    if let Some(headroom) = reading.headroom_bytes() {
        out.judge(Draft {
            device,
            rule: RuleId::ProbeHeadroomLow,
            config: &rules.probe_headroom_low,
            process: None,
            value: headroom as f64,
            text: &|| {
                (
                    format!(
                        "{name}: largest allocatable block {} is below the job size",
                        gib(headroom)
                    ),
                    format!(
                        "At the CUDA probe of {}, the largest block the driver would allocate was {} (with {} kept free as a safety margin), below the configured job size of {}.",
                        reading.at.to_rfc3339(),
                        gib(headroom),
                        gib(reading.headroom.as_ref().map_or(0, |search| search.margin_bytes)),
                        gib(rules.probe_headroom_low.threshold as u64),
                    ),
                )
            },
            remediation: "schedule the job on another GPU, or free memory here: idle PyTorch processes can return their allocator cache with torch.cuda.empty_cache(); shrink the job (smaller batches, activation checkpointing, mixed precision)",
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::engine::Verdict;

    use crate::model::{HeadroomSearch, HeadroomStop, Timestamp};

    const GIB: u64 = 1 << 30;

    fn device() -> DeviceInfo {
        DeviceInfo {
            index: 0,
            uuid: "GPU-1".into(),
            name: "H100".into(),
            pci_bus_id: None,
            driver_version: None,
            mig: None,
        }
    }

    fn reading(cuda_free: u64, nvml_free: Option<u64>, headroom: Option<u64>) -> ProbeReading {
        ProbeReading {
            at: Timestamp::from_unix_millis(1_767_225_600_000),
            cuda_free_bytes: cuda_free,
            cuda_total_bytes: 80 * GIB,
            nvml_free_bytes: nvml_free,
            context_create_seconds: 0.2,
            context_bytes: None,
            alloc_block_bytes: 64 << 20,
            alloc_latency_seconds: None,
            free_latency_seconds: None,
            alloc_samples: 0,
            headroom: headroom.map(|largest| HeadroomSearch {
                largest_block_bytes: largest,
                margin_bytes: GIB,
                attempts: 10,
                stopped: HeadroomStop::Converged,
                seconds: 0.1,
            }),
            duration_seconds: 0.5,
        }
    }

    fn verdicts(reading: &ProbeReading) -> Vec<(RuleId, Verdict, f64)> {
        let rules = crate::alerts::AlertsConfig::default().rules;
        let mut out = Observations::all();
        observe(&rules, &device(), "GPU 0 (H100)", reading, &mut out);
        out.into_vec().into_iter().map(|o| (o.key.rule, o.verdict, o.value)).collect()
    }

    #[test]
    fn free_mismatch_fires_on_a_gap_either_way_and_clears_with_hysteresis() {
        let agree = verdicts(&reading(10 * GIB, Some(10 * GIB + (2 << 20)), None));
        assert_eq!(agree, [(RuleId::ProbeFreeMismatch, Verdict::Clear, (2 << 20) as f64)]);
        let nvml_more = verdicts(&reading(10 * GIB, Some(12 * GIB), None));
        assert_eq!(nvml_more[0].1, Verdict::Breached);
        let cuda_more = verdicts(&reading(12 * GIB, Some(10 * GIB), None));
        assert_eq!(cuda_more[0], (RuleId::ProbeFreeMismatch, Verdict::Breached, (2 * GIB) as f64));
        // Between clear (512 MiB) and threshold (1 GiB): held, not cleared.
        let between = verdicts(&reading(10 * GIB, Some(10 * GIB + (700 << 20)), None));
        assert_eq!(between[0].1, Verdict::Hysteresis);
        // Without an NVML number there is nothing to compare.
        assert!(verdicts(&reading(10 * GIB, None, None)).is_empty());
    }

    #[test]
    fn headroom_low_fires_at_or_below_the_job_size_only_when_searched() {
        let plenty = verdicts(&reading(40 * GIB, None, Some(39 * GIB)));
        assert_eq!(plenty, [(RuleId::ProbeHeadroomLow, Verdict::Clear, (39 * GIB) as f64)]);
        let short = verdicts(&reading(5 * GIB, None, Some(3 * GIB)));
        assert_eq!(short[0].1, Verdict::Breached);
        let between = verdicts(&reading(6 * GIB, None, Some(4 * GIB + GIB / 2)));
        assert_eq!(between[0].1, Verdict::Hysteresis);
    }

    #[test]
    fn a_stale_probe_reading_is_not_judged_so_its_alert_resolves() {
        use crate::alerts::AlertState;
        use crate::alerts::evaluator::{Evaluator, SourceState};
        use crate::analysis::analyzer::Analyzer;
        use crate::history::{HistoryStore, Sizing};
        use crate::model::{FastReading, MemoryInfo};
        use std::time::Duration;

        let sizing = Sizing::for_retention(
            Duration::from_secs(3600),
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(10),
        );
        let store = HistoryStore::new(sizing);
        let history = store.set_devices(vec![device()]).remove(0);
        let config = crate::app::Config::default();
        let stale_after = crate::app::analysis_settings(&config).probe_stale_after;
        assert_eq!(stale_after, Duration::from_secs(30 * 60));
        let probed = reading(5 * GIB, None, Some(GIB));
        history.update_probe(|state| state.record_success(probed.clone()));
        let at = |after: Duration| {
            Timestamp::from_unix_millis(probed.at.unix_millis() + after.as_millis() as i64)
        };
        let mut analyzer = Analyzer::new(crate::app::analysis_settings(&config));
        let mut evaluator = Evaluator::new(&config.alerts);
        let mut headroom_alert = |evaluator: &mut Evaluator, now: Timestamp| {
            let fast = FastReading {
                at: now,
                memory: Some(MemoryInfo {
                    total_bytes: 80 * GIB,
                    reserved_bytes: Some(0),
                    used_bytes: 40 * GIB,
                    free_bytes: 40 * GIB,
                }),
                gpu_utilization: None,
                memory_bandwidth_utilization: None,
            };
            history.record_fast(fast).unwrap();
            let snapshot = analyzer.analyse(&store, now);
            let evaluation = evaluator.evaluate(&snapshot, SourceState::Up, now);
            evaluation.alerts.into_iter().find(|alert| alert.key.rule == RuleId::ProbeHeadroomLow)
        };
        let fresh = headroom_alert(&mut evaluator, at(Duration::from_secs(60))).unwrap();
        assert_eq!(fresh.state, AlertState::Firing);
        let still = headroom_alert(&mut evaluator, at(stale_after)).unwrap();
        assert_eq!(still.state, AlertState::Firing, "at exactly the limit it still counts");
        let stale =
            headroom_alert(&mut evaluator, at(stale_after + Duration::from_secs(1))).unwrap();
        assert_eq!(stale.state, AlertState::Resolved);
    }

    #[test]
    fn probe_alerts_explain_themselves_with_numbers() {
        let rules = crate::alerts::AlertsConfig::default().rules;
        let mut out = Observations::all();
        observe(
            &rules,
            &device(),
            "GPU 0 (H100)",
            &reading(5 * GIB, Some(7 * GIB), Some(3 * GIB)),
            &mut out,
        );
        let out = out.into_vec();
        let mismatch = &out[0];
        assert!(mismatch.summary.contains("2048 MiB"), "{}", mismatch.summary);
        assert!(
            mismatch.description.contains("NVML sees 2048 MiB more than CUDA"),
            "{}",
            mismatch.description
        );
        assert!(mismatch.remediation.contains("cuMemGetInfo"));
        let headroom = &out[1];
        assert!(
            headroom.description.contains("3.0 GiB") && headroom.description.contains("4.0 GiB"),
            "{}",
            headroom.description
        );
        assert_eq!(headroom.unit, "bytes");
    }
}
