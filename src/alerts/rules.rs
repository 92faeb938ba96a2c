//! The built-in rules: what each measures, on which side of its threshold
//! it fires, and how it explains itself (evidence and remediation).

use super::RulesConfig;
use crate::analysis::accounting::{self, fragmentation_ratio};
use crate::analysis::remediation;
use crate::analysis::snapshot::{DeviceSnapshot, ProcessFacts};
use crate::model::{DeviceInfo, MemoryInfo, RuleId, RuleSettings};

use super::engine::Observation;
use super::model::AlertKey;
pub use super::observations::Observations;
use super::observations::verdict;

pub(super) const GIB: f64 = (1u64 << 30) as f64;
pub(super) const MIB: f64 = (1u64 << 20) as f64;

pub(super) fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB)
}

/// A span as people say it: "26 s", "12 min", "1.5 h" (never "0 min").
fn minutes(seconds: f64) -> String {
    if seconds >= 3600.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else if seconds >= 90.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.0} s", seconds.max(0.0))
    }
}

/// One rule's finding for one subject, before [`Observations::judge`]
/// weighs it against the rule's settings.
pub(super) struct Draft<'a> {
    pub(super) device: &'a DeviceInfo,
    /// Its unit and direction come from the rule table.
    pub(super) rule: RuleId,
    pub(super) config: &'a RuleSettings,
    /// The process judged, for a process rule: its PID and, when known,
    /// its name.
    pub(super) process: Option<(u32, Option<&'a str>)>,
    pub(super) value: f64,
    /// Summary and description, written only when an alert may need them:
    /// most observations are clear, and formatting is most of a pass.
    pub(super) text: &'a dyn Fn() -> (String, String),
    pub(super) remediation: &'static str,
}

/// The alert for a device source that cannot list devices (NVML down).
pub fn source_down(rules: &RulesConfig) -> Observation {
    Observation {
        key: AlertKey { rule: RuleId::DeviceLost, uuid: "nvml".into(), pid: None },
        verdict: verdict(&rules.device_lost, RuleId::DeviceLost.spec().direction, 1.0),
        severity: rules.device_lost.severity,
        for_duration: rules.device_lost.for_duration,
        keep_firing_for: rules.device_lost.keep_firing_for,
        gpu: 0,
        process: None,
        value: 1.0,
        threshold: rules.device_lost.threshold,
        unit: RuleId::DeviceLost.spec().unit.as_str(),
        summary: "the GPU driver (NVML) cannot be used".into(),
        description: "vramd cannot list devices through NVML: no GPU memory is monitored until it answers (see vramd_nvml_up and the daemon log).".into(),
        remediation: "check that the NVIDIA driver is loaded (nvidia-smi), that the container has the driver library and device nodes, and the daemon log for the NVML error",
    }
}

/// Every rule's observation for one device and its processes.
pub fn observe(rules: &RulesConfig, snapshot: &DeviceSnapshot, out: &mut Observations<'_>) {
    let facts = &snapshot.facts;
    let device = &facts.info;
    let name = format!("GPU {} ({})", device.gpu_index(), device.name);
    out.judge(Draft {
        device,
        rule: RuleId::DeviceLost,
        config: &rules.device_lost,
        process: None,
        value: if facts.up { 0.0 } else { 1.0 },
        text: &|| {
            (
                format!("{name} does not answer"),
                format!(
                    "{name} {} is not answering memory reads: {}. Its metrics are absent until it answers again.",
                    device.uuid,
                    facts.failure.as_deref().unwrap_or("no reading")
                ),
            )
        },
        remediation: "check the kernel log and Xid errors (nvidia-smi -q, dmesg); a GPU that fell off the bus needs a reset or a node drain",
    });
    if let Some(memory) = facts.memory {
        memory_rules(rules, snapshot, &name, memory, out);
    }
    let covered = super::oom_rules::covered_pids(facts);
    for process in &facts.processes {
        process_rules(rules, device, &name, process, &covered, out);
    }
    super::oom_rules::observe(rules, facts, &name, out);
    if let Some(reading) = &facts.probe {
        super::probe_rules::observe(rules, device, &name, reading, out);
    }
    if let Some(new_errors) = facts.xid_in_window {
        out.judge(Draft {
            device,
            rule: RuleId::XidError,
            config: &rules.xid_error.rule,
            process: None,
            value: new_errors as f64,
            text: &|| {
                (
                    format!("{name} reported {new_errors} Xid error(s)"),
                    format!(
                        "{new_errors} Xid error(s) within {}; see vramd_xid_errors_total and the daemon log for the codes and their meaning.",
                        minutes(rules.xid_error.window.as_secs_f64())
                    ),
                )
            },
            remediation: "look up the Xid codes (NVIDIA Xid documentation): application faults (13, 31, 43) point at the workload, ECC and bus errors (48, 63, 64, 79, 94, 95) at the hardware",
        });
    }
}

fn memory_rules(
    rules: &RulesConfig,
    snapshot: &DeviceSnapshot,
    name: &str,
    memory: MemoryInfo,
    out: &mut Observations<'_>,
) {
    let (device, analysis) = (&snapshot.facts.info, &snapshot.analysis);
    if memory.total_bytes > 0 {
        // A preallocated pool (JAX) makes the GPU look full from its first
        // second: its unused part counts as free, and the pool itself is
        // judged against its own limit.
        let processes = &snapshot.facts.processes;
        let pool_free = accounting::preallocated_free_bytes(processes);
        let device_ratio =
            memory.used_bytes.saturating_sub(pool_free) as f64 / memory.total_bytes as f64;
        let pool_ratio = accounting::fullest_pool_ratio(processes);
        let ratio = pool_ratio.map_or(device_ratio, |pool| pool.max(device_ratio));
        let pools = match pool_ratio {
            Some(pool) => format!(
                " Preallocated pools: {} unused and counted free; the fullest is {:.0}% of its limit.",
                gib(pool_free),
                pool * 100.0
            ),
            None => String::new(),
        };
        out.judge(Draft {
            device,
            rule: RuleId::MemoryHigh,
            config: &rules.memory_high,
            process: None,
            value: ratio,
            text: &|| {
                (
                    format!("{name} memory {:.0}% used", ratio * 100.0),
                    format!(
                        "{} of {} used ({:.1}%), threshold {:.0}%; {} free, {} reserved by the driver.{pools}",
                        gib(memory.used_bytes),
                        gib(memory.total_bytes),
                        ratio * 100.0,
                        rules.memory_high.threshold * 100.0,
                        gib(memory.free_bytes),
                        memory.reserved_bytes.map_or_else(|| "unknown".to_owned(), gib)
                    ),
                )
            },
            remediation: remediation::ALLOCATION_PRESSURE,
        });
    }
    let tte = analysis.time_to_exhaustion_seconds;
    let (slope, fit) =
        analysis.growth_bytes_per_second.zip(analysis.growth_fit).unwrap_or((0.0, 0.0));
    out.judge(Draft {
        device,
        rule: RuleId::ExhaustionForecast,
        config: &rules.exhaustion_forecast.rule,
        process: None,
        value: tte.unwrap_or(f64::INFINITY),
        text: &|| {
            (
                match tte {
                    Some(seconds) => {
                        format!("{name} runs out of memory in about {}", minutes(seconds))
                    }
                    None => format!("{name} has no exhaustion forecast"),
                },
                format!(
                    "used memory grows {:.1} MiB/s (Theil–Sen over {}, fit {:.2}); {} free.",
                    slope / MIB,
                    minutes(analysis.trend_window_seconds),
                    fit,
                    gib(memory.free_bytes)
                ),
            )
        },
        remediation: "find the growing process (vramd_process_memory_used_bytes, /api/v1/devices/{gpu}); if it is a leak see its leak alert, otherwise give the job a larger GPU or reduce its peak memory",
    });
}

fn process_rules(
    rules: &RulesConfig,
    device: &DeviceInfo,
    name: &str,
    process: &ProcessFacts,
    covered: &[Option<u32>],
    out: &mut Observations<'_>,
) {
    // Formatted only inside the texts: most observations are clear.
    let who = || match &process.name {
        Some(comm) => format!("{comm} (pid {})", process.pid),
        None => format!("pid {}", process.pid),
    };
    // Growth already alerted on as a leak stays one: a later read of the
    // same growth as "cache or a leak" (its steps look few again) would
    // otherwise open `reserved_growth` beside the leak alert and let that
    // one resolve, a second page for one leak. The upgrade runs one way.
    let alerted_as_leak = out.holds_alert(RuleId::LeakSuspected, &device.uuid, Some(process.pid));
    let judged = process.leak.as_ref().map(|leak| {
        if leak.cache_or_leak && !alerted_as_leak {
            RuleId::ReservedGrowth
        } else {
            RuleId::LeakSuspected
        }
    });
    if let Some(leak) = process.leak.as_ref().filter(|_| judged == Some(RuleId::ReservedGrowth)) {
        out.judge(Draft {
            device,
            rule: RuleId::ReservedGrowth,
            config: &rules.reserved_growth,
            process: Some((process.pid, process.name.as_deref())),
            value: leak.evidence.slope_bytes_per_second,
            text: &|| {
                (
                    format!("{} on {name}: reserved memory growing: cache growth or a leak", who()),
                    format!(
                        "NVML usage grew {:.1} MiB/s over {}, from {} to {}, in a few large steps; \
                         with no allocator statistics the cache following the largest batch so \
                         far cannot be told from a leak.",
                        leak.evidence.slope_bytes_per_second / MIB,
                        minutes(leak.evidence.window_seconds),
                        gib(leak.evidence.baseline_bytes),
                        gib(leak.evidence.latest_bytes)
                    ),
                )
            },
            remediation: remediation::CACHE_OR_LEAK,
        });
    } else if let Some(leak) = &process.leak {
        out.judge(Draft {
            device,
            rule: RuleId::LeakSuspected,
            config: &rules.leak_suspected.rule,
            process: Some((process.pid, process.name.as_deref())),
            value: leak.evidence.slope_bytes_per_second,
            text: &|| {
                let who = who();
                (
                    format!("{who} on {name} grows steadily: leak suspected"),
                    format!(
                        "{} grew {:.1} MiB/s over {} (fit {:.2}), from {} to {} without returning to its baseline.",
                        leak.metric.as_str(),
                        leak.evidence.slope_bytes_per_second / MIB,
                        minutes(leak.evidence.window_seconds),
                        leak.evidence.fit,
                        gib(leak.evidence.baseline_bytes),
                        gib(leak.evidence.latest_bytes)
                    ),
                )
            },
            remediation: remediation::LEAK,
        });
    }
    for (rule, config) in [
        (RuleId::ReservedGrowth, &rules.reserved_growth),
        (RuleId::LeakSuspected, &rules.leak_suspected.rule),
    ] {
        if judged != Some(rule) {
            out.clear_of(Draft {
                device,
                rule,
                config,
                process: Some((process.pid, process.name.as_deref())),
                value: 0.0,
                text: &|| (String::new(), String::new()),
                remediation: "",
            });
        }
    }
    if let Some(stats) = process.allocator {
        let ratio = fragmentation_ratio(&stats, process.snapshot.as_ref()).unwrap_or(0.0);
        let big_enough =
            stats.reserved_bytes >= rules.allocator_fragmentation_high.min_reserved.get();
        out.judge(Draft {
            device,
            rule: RuleId::AllocatorFragmentationHigh,
            config: &rules.allocator_fragmentation_high.rule,
            process: Some((process.pid, process.name.as_deref())),
            value: if big_enough { ratio } else { 0.0 },
            text: &|| {
                let who = who();
                (
                    format!(
                        "{who} on {name}: {:.0}% of reserved memory is fragmented",
                        ratio * 100.0
                    ),
                    format!(
                        "inactive_split {} of reserved {} ({:.1}%); allocated {}. These free pieces of split segments cannot be returned by empty_cache().",
                        gib(stats.inactive_split_bytes),
                        gib(stats.reserved_bytes),
                        ratio * 100.0,
                        gib(stats.allocated_bytes)
                    ),
                )
            },
            remediation: remediation::FRAGMENTATION,
        });
    }
    if let Some(retries) = process.retries_in_window {
        out.judge(Draft {
            device,
            rule: RuleId::AllocatorRetries,
            config: &rules.allocator_retries.rule,
            process: Some((process.pid, process.name.as_deref())),
            value: retries as f64,
            text: &|| {
                let who = who();
                (
                    format!(
                        "{who} on {name}: allocator had to flush its cache {retries} time(s)"
                    ),
                    if process.retries_from_driver {
                        format!(
                            "the driver trace saw {retries} allocation(s) within {} fail with CUDA_ERROR_OUT_OF_MEMORY and succeed when retried after frees: the cache was flushed to make room, the step before an OOM.",
                            minutes(rules.allocator_retries.window.as_secs_f64())
                        )
                    } else {
                        format!(
                            "num_alloc_retries rose by {retries} within {}: allocations only succeeded after freeing the whole cache, the step before an OOM.",
                            minutes(rules.allocator_retries.window.as_secs_f64())
                        )
                    },
                )
            },
            remediation: remediation::ALLOCATION_PRESSURE,
        });
    }
    // An OOM event already describes this process's OOM, with its numbers.
    if let Some(ooms) = process.ooms_in_window
        && !covered.contains(&Some(process.pid))
    {
        out.judge(Draft {
            device,
            rule: RuleId::AllocatorOom,
            config: &rules.allocator_oom.rule,
            process: Some((process.pid, process.name.as_deref())),
            value: ooms as f64,
            text: &|| {
                let who = who();
                (
                    format!("{who} on {name} ran out of memory"),
                    format!(
                        "num_ooms rose by {ooms} within {}.",
                        minutes(rules.allocator_oom.window.as_secs_f64())
                    ),
                )
            },
            remediation: remediation::ALLOCATION_PRESSURE,
        });
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
