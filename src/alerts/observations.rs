//! One evaluation's observations as the rules write them: each rule's
//! draft judged against its thresholds, and kept only where it can change
//! an alert. Depends on: `alerts::{engine, model, rules}` (the observation,
//! the alerts held, the draft) and `model`'s rule settings.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use super::engine::{Observation, Verdict};
use super::model::{Alert, AlertKey, AlertState};
use super::rules::Draft;
use crate::model::{Direction, RuleId, RuleSettings};

/// Where `value` stands against `rule`'s threshold and clear.
pub(super) fn verdict(rule: &RuleSettings, direction: Direction, value: f64) -> Verdict {
    let (breached, held) = match direction {
        Direction::Above => (value >= rule.threshold, value > rule.clear),
        Direction::Below => (value <= rule.threshold, value < rule.clear),
    };
    if breached {
        Verdict::Breached
    } else if held {
        Verdict::Hysteresis
    } else {
        Verdict::Clear
    }
}

/// One pass's observations, as the rules write them.
///
/// Why not every observation is kept: a subject that is not past its
/// threshold and has no pending or firing alert changes nothing in the
/// engine (nothing starts below the threshold, and a resolved alert stays
/// resolved), yet each observation cost its key's strings, its process
/// name and, between `clear` and `threshold`, its texts: most of a pass
/// for 8 GPUs × 64 processes. Such an observation is left out when the
/// alerts held before the pass say so; a subject breached earlier in the
/// same pass still gets every later observation, as the engine would see
/// it.
pub struct Observations<'a> {
    list: Vec<Observation>,
    /// (rule, uuid, pid) of every pending or firing alert before the pass,
    /// sorted for a binary search; `None` keeps every observation.
    active: Option<Vec<(RuleId, &'a str, Option<u32>)>>,
    /// Where in `list` the breached observations are, by a hash of their
    /// key: a clear observation is looked up in constant time, not against
    /// every breached one (8 GPUs × 64 processes can breach at once).
    breached: HashMap<u64, Vec<usize>>,
    keys: RandomState,
}

impl<'a> Observations<'a> {
    /// Keeps only the observations that can change `alerts` (the engine's,
    /// in key order).
    pub fn against(alerts: impl Iterator<Item = &'a Alert>) -> Self {
        let mut active = alerts
            .filter(|alert| alert.state != AlertState::Resolved)
            .map(|alert| (alert.key.rule, alert.key.uuid.as_str(), alert.key.pid))
            .collect::<Vec<_>>();
        // The engine lists its keys by rule name; `RuleId` orders by
        // declaration, so the sort only reorders runs of one rule, each
        // already sorted by uuid and pid.
        active.sort_unstable();
        Self { active: Some(active), ..Self::all() }
    }

    /// Keeps every observation, clear ones included.
    pub fn all() -> Self {
        Self { list: Vec::new(), active: None, breached: HashMap::new(), keys: RandomState::new() }
    }

    /// Judges `draft` by its rule's settings and keeps the observation
    /// unless it cannot change an alert (texts written only if needed).
    pub(super) fn judge(&mut self, draft: Draft<'_>) {
        if draft.config.enabled {
            let verdict = verdict(draft.config, draft.rule.spec().direction, draft.value);
            self.observe(draft, verdict);
        }
    }

    /// `draft`'s rule judged clear for a subject it has no value for now
    /// (a process with no leak evidence this pass): kept only where an
    /// alert of it is pending or firing, which then resolves or waits out
    /// its `keep_firing_for` as for any clear value. An alert nobody
    /// observes resolves at once, as for a process that exited.
    pub(super) fn clear_of(&mut self, draft: Draft<'_>) {
        if draft.config.enabled {
            self.observe(draft, Verdict::Clear);
        }
    }

    /// Keeps `draft`'s observation with `verdict`, unless it cannot change
    /// an alert.
    fn observe(&mut self, draft: Draft<'_>, verdict: Verdict) {
        let (device, spec) = (draft.device, draft.rule.spec());
        let pid = draft.process.map(|(pid, _)| pid);
        if verdict != Verdict::Breached && !self.may_matter(draft.rule, &device.uuid, pid) {
            return;
        }
        let (summary, description) =
            if verdict == Verdict::Clear { (String::new(), String::new()) } else { (draft.text)() };
        self.push(Observation {
            key: AlertKey { rule: draft.rule, uuid: device.uuid.clone(), pid },
            verdict,
            severity: draft.config.severity,
            for_duration: draft.config.for_duration,
            keep_firing_for: draft.config.keep_firing_for,
            gpu: device.gpu_index(),
            process: draft.process.and_then(|(_, name)| name).map(str::to_owned),
            value: draft.value,
            threshold: draft.config.threshold,
            unit: spec.unit.as_str(),
            summary,
            description,
            remediation: draft.remediation,
        });
    }

    pub fn push(&mut self, observation: Observation) {
        // With every observation kept (`all`), nothing looks breached keys up.
        if observation.verdict == Verdict::Breached && self.active.is_some() {
            let key = &observation.key;
            let hash = self.keys.hash_one((key.rule, key.uuid.as_str(), key.pid));
            self.breached.entry(hash).or_default().push(self.list.len());
        }
        self.list.push(observation);
    }

    pub fn into_vec(self) -> Vec<Observation> {
        self.list
    }

    /// Whether an alert of `rule` for this subject was pending or firing
    /// before the pass; false where every observation is kept (`all`),
    /// which knows of no alerts.
    pub(super) fn holds_alert(&self, rule: RuleId, uuid: &str, pid: Option<u32>) -> bool {
        self.active.as_ref().is_some_and(|active| active.binary_search(&(rule, uuid, pid)).is_ok())
    }

    /// Whether an observation that is not breached can still change an
    /// alert: one held before the pass, or one breached earlier in it.
    fn may_matter(&self, rule: RuleId, uuid: &str, pid: Option<u32>) -> bool {
        if self.active.is_none() || self.holds_alert(rule, uuid, pid) {
            return true;
        }
        let Some(candidates) = self.breached.get(&self.keys.hash_one((rule, uuid, pid))) else {
            return false;
        };
        candidates.iter().filter_map(|&index| self.list.get(index)).any(|breached| {
            breached.key.rule == rule && breached.key.uuid == uuid && breached.key.pid == pid
        })
    }
}
