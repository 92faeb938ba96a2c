//! `allocator_oom` raised by the OOM events themselves: the alert names the
//! event (requested, free, largest free block, snapshot) and judges from
//! its numbers whether fragmentation or real exhaustion caused it.
//!
//! One alert per process and OOM: where an event covers a process, the
//! `num_ooms` counter step the reporter sends later describes the same OOM
//! and is not observed separately (`covered_pids`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::RulesConfig;
use crate::analysis::remediation;
use crate::analysis::snapshot::DeviceFacts;
use crate::model::{OomCause, OomEvent, RuleId};

use super::rules::{Draft, GIB, MIB, Observations};

/// The processes (host PIDs; `None`: events no process was joined to) with
/// OOM events in the window.
pub(super) fn covered_pids(facts: &DeviceFacts) -> Vec<Option<u32>> {
    let mut pids: Vec<Option<u32>> = facts.oom_events.iter().map(|event| event.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// One observation per process with OOM events in the window, described
/// by its newest event.
pub(super) fn observe(
    rules: &RulesConfig,
    facts: &DeviceFacts,
    name: &str,
    out: &mut Observations<'_>,
) {
    let mut by_pid: BTreeMap<Option<u32>, (u64, &Arc<OomEvent>)> = BTreeMap::new();
    for event in &facts.oom_events {
        let entry = by_pid.entry(event.pid).or_insert((0, event));
        entry.0 += 1;
        // Oldest first in the window: the last one seen is the newest.
        entry.1 = event;
    }
    for (pid, (count, event)) in by_pid {
        let process = pid.and_then(|pid| {
            facts.processes.iter().find(|process| process.pid == pid)?.name.clone()
        });
        let cause = event.cause();
        let device_total = facts.memory.map(|memory| memory.total_bytes);
        // A request larger than the whole device is a real OOM (a wrong
        // shape, a batch meant for many GPUs), and the one case where
        // freeing memory cannot help.
        let beyond_device = device_total.is_some_and(|total| event.requested_bytes > total);
        out.judge(Draft {
            device: &facts.info,
            rule: RuleId::AllocatorOom,
            config: &rules.allocator_oom.rule,
            process: pid.map(|pid| (pid, process.as_deref())),
            value: count as f64,
            text: &|| {
                let who = match (&process, pid) {
                    (Some(comm), Some(pid)) => format!("{comm} (pid {pid})"),
                    (None, Some(pid)) => format!("pid {pid}"),
                    _ => format!("pid {} on {}", event.reporter_pid, event.hostname),
                };
                (
                    format!("{who} on {name} ran out of memory ({})", cause.as_str()),
                    describe(event, count, device_total),
                )
            },
            remediation: match cause {
                _ if beyond_device => remediation::REQUEST_BEYOND_DEVICE,
                OomCause::Fragmentation => remediation::FRAGMENTATION,
                OomCause::Exhaustion | OomCause::Unknown => remediation::ALLOCATION_PRESSURE,
            },
        });
    }
}

/// GiB from 1 GiB up, MiB below: an OOM of a few MiB is common.
fn size(bytes: u64) -> String {
    if bytes as f64 >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB)
    } else {
        format!("{:.0} MiB", bytes as f64 / MIB)
    }
}

fn optional(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "unknown".to_owned(), size)
}

/// The evidence: which event, what was asked and what was free, the
/// verdict, and where the snapshot lies.
fn describe(event: &OomEvent, count: u64, device_total: Option<u64>) -> String {
    let largest = event
        .largest_free_block_bytes
        .or_else(|| event.snapshot.map(|snapshot| snapshot.largest_free_block_bytes));
    let verdict = match event.cause() {
        _ if device_total.is_some_and(|total| event.requested_bytes > total) => format!(
            "the request alone is larger than the device's {} of memory, so no freeing could have served it",
            optional(device_total)
        ),
        OomCause::Fragmentation => format!(
            "fragmentation: {} was free in total but the largest free block was {}, smaller than the request",
            optional(event.free_bytes()),
            optional(largest)
        ),
        OomCause::Exhaustion => format!(
            "real exhaustion: only {} was free in the cache and on the device together",
            optional(event.free_bytes())
        ),
        OomCause::Unknown => {
            "the event lacks the free-memory figures to tell fragmentation from exhaustion"
                .to_owned()
        }
    };
    // The upload, when there is one, arrives after the event: the evidence
    // names where it will be served rather than whether it is there yet.
    let snapshot = match &event.snapshot_path {
        Some(path) => format!(
            " Allocator snapshot: {path} on the reporter's host; when uploaded (ingest.snapshot_dir), GET /api/v1/oom-events/{id}/snapshot (open it at https://pytorch.org/memory_viz).",
            id = event.id
        ),
        None => " No allocator snapshot was written (start the reporter with record_history=N)."
            .to_owned(),
    };
    let more =
        if count > 1 { format!(" {count} OOM events within the window;") } else { String::new() };
    format!(
        "OOM event {id} (GET /api/v1/oom-events/{id}):{more} an allocation of {requested} failed with {device_free} free on the device, {cache} cached by the allocator and a largest free block of {largest}; {verdict}.{snapshot}",
        id = event.id,
        requested = size(event.requested_bytes),
        device_free = optional(event.device_free_bytes),
        cache = optional(event.stats.map(|stats| stats.reserved_bytes - stats.allocated_bytes)),
        largest = optional(largest),
    )
}
