//! The alert state machine: inactive → pending → firing → resolved, with
//! hysteresis, `for` durations, bounded memory and stable identity.
//!
//! Pure: every input, including the time, is an argument. Rules turn
//! analysis into [`Observation`]s; the engine turns observations into
//! alerts and [`Transition`]s.

use std::collections::BTreeMap;
use std::time::Duration;

use super::model::{Alert, AlertKey, AlertState, Severity, Transition};
use crate::model::Timestamp;

/// Where a rule's value stands against its thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Past `threshold`: the condition holds.
    Breached,
    /// Between `clear` and `threshold`: a firing alert stays firing, a
    /// pending one is dropped, nothing new starts.
    Hysteresis,
    /// Back past `clear`.
    Clear,
}

/// One rule's finding for one subject (device, or process on a device) at
/// one evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub key: AlertKey,
    pub verdict: Verdict,
    pub severity: Severity,
    pub for_duration: Duration,
    pub gpu: u32,
    pub process: Option<String>,
    pub value: f64,
    pub threshold: f64,
    pub unit: &'static str,
    pub summary: String,
    pub description: String,
    pub remediation: &'static str,
}

/// Bounds and retention of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineLimits {
    pub resolved_retention: Duration,
    pub max_alerts: usize,
}

pub struct Engine {
    alerts: BTreeMap<AlertKey, Alert>,
    limits: EngineLimits,
    dropped: u64,
}

impl Engine {
    pub fn new(limits: EngineLimits) -> Self {
        Self { alerts: BTreeMap::new(), limits, dropped: 0 }
    }

    /// New bounds from the next evaluation on. Alerts already kept stay,
    /// even beyond a lowered `max_alerts`: a new one then takes the place
    /// of a resolved one, or is dropped and counted.
    pub fn set_limits(&mut self, limits: EngineLimits) {
        self.limits = limits;
    }

    /// Alerts that could not be kept because `max_alerts` was reached.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Every kept alert, in key order.
    pub fn alerts(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values()
    }

    pub fn firing(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values().filter(|alert| alert.state == AlertState::Firing)
    }

    /// Applies one evaluation. `observations` must hold every subject the
    /// rules looked at that is breached or has a pending or firing alert
    /// (any other changes nothing: `rules::Observations` leaves it out); a
    /// kept alert whose key is absent is treated as clear (its process
    /// exited, its rule was disabled, its device is gone), unless it is
    /// being handed over to its upgrade ([`RuleId::upgraded_to`]): then it
    /// stays firing while the upgrade is pending, and resolves in the
    /// evaluation the upgrade fires.
    pub fn evaluate(&mut self, now: Timestamp, observations: Vec<Observation>) -> Vec<Transition> {
        let mut transitions = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        // Subjects whose condition still holds (breached, or between clear
        // and threshold): an alert handed over to one of them stays.
        let mut holding = std::collections::BTreeSet::new();
        for observation in observations {
            seen.insert(observation.key.clone());
            if observation.verdict != Verdict::Clear {
                holding.insert(observation.key.clone());
            }
            self.apply(now, observation, &mut transitions);
        }
        let unseen: Vec<AlertKey> =
            self.alerts.keys().filter(|key| !seen.contains(*key)).cloned().collect();
        for key in unseen {
            let upgrade = key.rule.upgraded_to().map(|rule| AlertKey { rule, ..key.clone() });
            let state = upgrade
                .as_ref()
                .and_then(|upgrade| self.alerts.get(upgrade))
                .map(|alert| alert.state);
            let upgrade_holds = upgrade.is_some_and(|upgrade| holding.contains(&upgrade));
            match state {
                Some(AlertState::Firing) => self.hand_over(now, &key, &mut transitions),
                // The upgrade waits out its `for`, or was dropped in its
                // hysteresis: the condition holds, so its alert does too.
                _ if upgrade_holds && self.is_firing(&key) => {}
                _ => self.clear(now, &key, &mut transitions),
            }
        }
        self.expire(now);
        transitions
    }

    fn apply(
        &mut self,
        now: Timestamp,
        observation: Observation,
        transitions: &mut Vec<Transition>,
    ) {
        let existing = self.alerts.get(&observation.key).map(|alert| alert.state);
        match (existing, observation.verdict) {
            (None | Some(AlertState::Resolved), Verdict::Breached) => {
                if existing.is_none() && !self.make_room() {
                    self.dropped = self.dropped.saturating_add(1);
                    return;
                }
                let mut alert = new_alert(now, &observation);
                if observation.for_duration.is_zero() {
                    alert.state = AlertState::Firing;
                    alert.firing_since = Some(now);
                }
                transitions.push(Transition { from: existing, alert: alert.clone() });
                self.alerts.insert(observation.key, alert);
            }
            (None | Some(AlertState::Resolved), Verdict::Hysteresis | Verdict::Clear) => {}
            (Some(AlertState::Pending), Verdict::Breached) => {
                let for_duration = observation.for_duration;
                if let Some(alert) = self.alerts.get_mut(&observation.key) {
                    refresh(alert, now, observation);
                    let held = now.duration_since(alert.since).unwrap_or_default();
                    if held >= for_duration {
                        alert.state = AlertState::Firing;
                        alert.firing_since = Some(now);
                        transitions.push(Transition {
                            from: Some(AlertState::Pending),
                            alert: alert.clone(),
                        });
                    }
                }
            }
            (Some(AlertState::Pending), Verdict::Hysteresis | Verdict::Clear) => {
                drop_pending(&mut self.alerts, now, &observation.key, transitions);
            }
            (Some(AlertState::Firing), verdict) => {
                if let Some(alert) = self.alerts.get_mut(&observation.key) {
                    refresh(alert, now, observation);
                    if verdict == Verdict::Clear {
                        resolve(alert, now, transitions);
                    }
                }
            }
        }
    }

    fn is_firing(&self, key: &AlertKey) -> bool {
        self.alerts.get(key).is_some_and(|alert| alert.state == AlertState::Firing)
    }

    /// Resolves `key`'s alert as its upgrade fires, saying so: a resolved
    /// notification that reads as "the problem went away" would be false.
    fn hand_over(&mut self, now: Timestamp, key: &AlertKey, transitions: &mut Vec<Transition>) {
        if let (Some(rule), Some(alert)) = (key.rule.upgraded_to(), self.alerts.get_mut(key))
            && alert.state == AlertState::Firing
        {
            alert.description =
                format!("{} Superseded by {rule} for the same process.", alert.description);
        }
        self.clear(now, key, transitions);
    }

    fn clear(&mut self, now: Timestamp, key: &AlertKey, transitions: &mut Vec<Transition>) {
        match self.alerts.get(key).map(|alert| alert.state) {
            Some(AlertState::Pending) => drop_pending(&mut self.alerts, now, key, transitions),
            Some(AlertState::Firing) => {
                if let Some(alert) = self.alerts.get_mut(key) {
                    alert.updated_at = now;
                    resolve(alert, now, transitions);
                }
            }
            Some(AlertState::Resolved) | None => {}
        }
    }

    /// Forgets resolved alerts older than the retention.
    fn expire(&mut self, now: Timestamp) {
        let retention = self.limits.resolved_retention;
        self.alerts.retain(|_, alert| match (alert.state, alert.resolved_at) {
            (AlertState::Resolved, Some(at)) => {
                now.duration_since(at).is_none_or(|age| age < retention)
            }
            _ => true,
        });
    }

    /// Frees a slot for a new alert by forgetting the oldest resolved one;
    /// false when every kept alert is still pending or firing.
    fn make_room(&mut self) -> bool {
        if self.alerts.len() < self.limits.max_alerts {
            return true;
        }
        let oldest = self
            .alerts
            .iter()
            .filter(|(_, alert)| alert.state == AlertState::Resolved)
            .min_by_key(|(_, alert)| alert.resolved_at)
            .map(|(key, _)| key.clone());
        oldest.is_some_and(|key| self.alerts.remove(&key).is_some())
    }
}

fn new_alert(now: Timestamp, observation: &Observation) -> Alert {
    Alert {
        id: observation.key.id(),
        key: observation.key.clone(),
        severity: observation.severity,
        state: AlertState::Pending,
        gpu: observation.gpu,
        process: observation.process.clone(),
        value: observation.value,
        threshold: observation.threshold,
        unit: observation.unit.to_owned(),
        since: now,
        firing_since: None,
        resolved_at: None,
        updated_at: now,
        summary: observation.summary.clone(),
        description: observation.description.clone(),
        remediation: observation.remediation.to_owned(),
    }
}

/// The latest numbers and words; identity and timeline stay. Takes the
/// observation, so its texts move rather than being copied every pass.
fn refresh(alert: &mut Alert, now: Timestamp, observation: Observation) {
    alert.value = observation.value;
    alert.threshold = observation.threshold;
    alert.severity = observation.severity;
    alert.updated_at = now;
    if observation.process.is_some() {
        alert.process = observation.process;
    }
    // A clear observation carries no text (it is not written for the many
    // subjects that are fine): a resolving alert keeps its last words.
    if !observation.summary.is_empty() {
        alert.summary = observation.summary;
        alert.description = observation.description;
        if alert.remediation != observation.remediation {
            alert.remediation = observation.remediation.to_owned();
        }
    }
}

/// A condition that stopped holding before `for` never fired: it is
/// forgotten (no resolved alert is kept, no notifier hears of it), but the
/// readers that were told it is pending (the event stream, `vramd
/// analyze`) are told it ended, as `resolved` with no `firing_since`.
fn drop_pending(
    alerts: &mut BTreeMap<AlertKey, Alert>,
    now: Timestamp,
    key: &AlertKey,
    transitions: &mut Vec<Transition>,
) {
    if let Some(mut alert) = alerts.remove(key) {
        alert.state = AlertState::Resolved;
        alert.updated_at = now;
        alert.resolved_at = Some(now);
        transitions.push(Transition { from: Some(AlertState::Pending), alert });
    }
}

fn resolve(alert: &mut Alert, now: Timestamp, transitions: &mut Vec<Transition>) {
    alert.state = AlertState::Resolved;
    alert.resolved_at = Some(now);
    transitions.push(Transition { from: Some(AlertState::Firing), alert: alert.clone() });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RuleId;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_unix_millis(seconds * 1000)
    }

    fn observation(rule: RuleId, verdict: Verdict, for_seconds: u64) -> Observation {
        Observation {
            key: AlertKey { rule, uuid: "GPU-0".into(), pid: None },
            verdict,
            severity: Severity::Warning,
            for_duration: Duration::from_secs(for_seconds),
            gpu: 0,
            process: None,
            value: 0.95,
            threshold: 0.92,
            unit: "ratio",
            summary: "memory high".into(),
            description: "used 95% of total".into(),
            remediation: "free memory",
        }
    }

    fn engine() -> Engine {
        Engine::new(EngineLimits { resolved_retention: Duration::from_secs(60), max_alerts: 3 })
    }

    fn states(transitions: &[Transition]) -> Vec<(Option<AlertState>, AlertState)> {
        transitions.iter().map(|t| (t.from, t.alert.state)).collect()
    }

    #[test]
    fn pending_then_firing_after_the_for_duration_then_resolved() {
        let mut engine = engine();
        let fired =
            engine.evaluate(at(0), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)]);
        assert_eq!(states(&fired), vec![(None, AlertState::Pending)]);
        assert!(
            engine
                .evaluate(at(30), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)])
                .is_empty()
        );
        let fired =
            engine.evaluate(at(60), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)]);
        assert_eq!(states(&fired), vec![(Some(AlertState::Pending), AlertState::Firing)]);
        let alert = &fired[0].alert;
        assert_eq!((alert.since, alert.firing_since), (at(0), Some(at(60))));

        assert!(
            engine
                .evaluate(at(70), vec![observation(RuleId::MemoryHigh, Verdict::Hysteresis, 60)])
                .is_empty(),
            "between clear and threshold a firing alert keeps firing"
        );
        let resolved =
            engine.evaluate(at(80), vec![observation(RuleId::MemoryHigh, Verdict::Clear, 60)]);
        assert_eq!(states(&resolved), vec![(Some(AlertState::Firing), AlertState::Resolved)]);
        assert_eq!(resolved[0].alert.resolved_at, Some(at(80)));
        assert_eq!(resolved[0].alert.id, "memory_high.GPU-0", "identity is stable");
    }

    #[test]
    fn a_pending_alert_that_clears_early_is_forgotten_and_its_readers_told() {
        let mut engine = engine();
        engine.evaluate(at(0), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)]);
        let transitions =
            engine.evaluate(at(10), vec![observation(RuleId::MemoryHigh, Verdict::Hysteresis, 60)]);
        assert_eq!(states(&transitions), vec![(Some(AlertState::Pending), AlertState::Resolved)]);
        let ended = &transitions[0].alert;
        assert_eq!((ended.firing_since, ended.resolved_at), (None, Some(at(10))));
        assert_eq!(engine.alerts().count(), 0, "not kept as a resolved alert");
        engine.evaluate(at(20), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)]);
        let unseen = engine.evaluate(at(30), vec![]);
        assert_eq!(states(&unseen), vec![(Some(AlertState::Pending), AlertState::Resolved)]);
    }

    #[test]
    fn an_upgrade_takes_over_its_alert_without_a_gap_or_a_second_alert() {
        // `reserved_growth` firing; the same process's growth then reads as
        // a leak: the rules say `leak_suspected` (for 60 s) instead.
        let mut engine = engine();
        let process = |rule, verdict| Observation {
            key: AlertKey { rule, uuid: "GPU-0".into(), pid: Some(7) },
            ..observation(rule, verdict, 60)
        };
        engine.evaluate(at(0), vec![process(RuleId::ReservedGrowth, Verdict::Breached)]);
        engine.evaluate(at(60), vec![process(RuleId::ReservedGrowth, Verdict::Breached)]);
        let firing = |engine: &Engine| -> Vec<RuleId> {
            engine.firing().map(|alert| alert.key.rule).collect()
        };
        assert_eq!(firing(&engine), [RuleId::ReservedGrowth]);
        let pending =
            engine.evaluate(at(90), vec![process(RuleId::LeakSuspected, Verdict::Breached)]);
        assert_eq!(states(&pending), [(None, AlertState::Pending)]);
        assert_eq!(firing(&engine), [RuleId::ReservedGrowth], "no gap while the upgrade waits");
        let upgraded =
            engine.evaluate(at(150), vec![process(RuleId::LeakSuspected, Verdict::Breached)]);
        let rules: Vec<_> = upgraded.iter().map(|t| (t.alert.key.rule, t.alert.state)).collect();
        assert_eq!(
            rules,
            [
                (RuleId::LeakSuspected, AlertState::Firing),
                (RuleId::ReservedGrowth, AlertState::Resolved)
            ],
            "handed over in one evaluation"
        );
        assert!(upgraded[1].alert.description.contains("Superseded by leak_suspected"));
        assert_eq!(firing(&engine), [RuleId::LeakSuspected]);
        // An upgrade that never fires leaves nothing behind it: the growth
        // stopped, and the alert resolves as any other.
        let mut engine = super::tests::engine();
        engine.evaluate(at(0), vec![process(RuleId::ReservedGrowth, Verdict::Breached)]);
        engine.evaluate(at(60), vec![process(RuleId::ReservedGrowth, Verdict::Breached)]);
        engine.evaluate(at(90), vec![process(RuleId::LeakSuspected, Verdict::Breached)]);
        let ended = engine.evaluate(at(120), vec![]);
        let rules: Vec<_> = ended.iter().map(|t| (t.alert.key.rule, t.alert.state)).collect();
        assert!(rules.contains(&(RuleId::ReservedGrowth, AlertState::Resolved)), "{rules:?}");
        assert!(firing(&engine).is_empty());
    }

    #[test]
    fn zero_for_fires_at_once_and_an_unseen_subject_resolves() {
        let mut engine = engine();
        let fired =
            engine.evaluate(at(0), vec![observation(RuleId::AllocatorOom, Verdict::Breached, 0)]);
        assert_eq!(states(&fired), vec![(None, AlertState::Firing)]);
        let resolved = engine.evaluate(at(5), vec![]);
        assert_eq!(states(&resolved), vec![(Some(AlertState::Firing), AlertState::Resolved)]);
    }

    #[test]
    fn resolved_alerts_stay_visible_for_the_retention_then_go() {
        let mut engine = engine();
        engine.evaluate(at(0), vec![observation(RuleId::XidError, Verdict::Breached, 0)]);
        engine.evaluate(at(1), vec![]);
        engine.evaluate(at(60), vec![]);
        assert_eq!(engine.alerts().count(), 1, "still visible at 59 s");
        engine.evaluate(at(61), vec![]);
        assert_eq!(engine.alerts().count(), 0);
    }

    #[test]
    fn a_resolved_alert_that_breaches_again_starts_a_new_cycle() {
        let mut engine = engine();
        engine.evaluate(at(0), vec![observation(RuleId::XidError, Verdict::Breached, 0)]);
        engine.evaluate(at(1), vec![observation(RuleId::XidError, Verdict::Clear, 0)]);
        let again =
            engine.evaluate(at(2), vec![observation(RuleId::XidError, Verdict::Breached, 0)]);
        assert_eq!(states(&again), vec![(Some(AlertState::Resolved), AlertState::Firing)]);
        assert_eq!(again[0].alert.since, at(2));
        assert_eq!(again[0].alert.resolved_at, None);
    }

    #[test]
    fn the_bound_evicts_resolved_first_then_counts_what_it_drops() {
        let mut engine = engine();
        let rules = [
            RuleId::MemoryHigh,
            RuleId::ExhaustionForecast,
            RuleId::LeakSuspected,
            RuleId::AllocatorRetries,
        ];
        engine.evaluate(at(0), vec![observation(rules[0], Verdict::Breached, 0)]);
        engine.evaluate(at(1), vec![]);
        let firing: Vec<Observation> =
            rules[1..].iter().map(|&rule| observation(rule, Verdict::Breached, 0)).collect();
        engine.evaluate(at(2), firing.clone());
        assert_eq!(engine.alerts().count(), 3, "the resolved one made room");
        assert!(engine.alerts().all(|alert| alert.state == AlertState::Firing));
        let mut more = firing;
        more.push(observation(RuleId::AllocatorOom, Verdict::Breached, 0));
        engine.evaluate(at(3), more);
        assert_eq!(engine.alerts().count(), 3);
        assert_eq!(engine.dropped(), 1);
    }
}
