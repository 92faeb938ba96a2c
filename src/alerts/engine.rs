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
    /// How long a firing alert stays firing once this subject reads clear
    /// (its rule's `keep_firing_for`); not applied to an alert nobody
    /// observes any more (its process exited, its device is gone).
    pub keep_firing_for: Duration,
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
    /// Firing alerts whose condition reads clear, kept firing for their
    /// `keep_firing_for`: since when it has read clear.
    lapsed: BTreeMap<AlertKey, Timestamp>,
    limits: EngineLimits,
    dropped: u64,
}

impl Engine {
    pub fn new(limits: EngineLimits) -> Self {
        Self { alerts: BTreeMap::new(), lapsed: BTreeMap::new(), limits, dropped: 0 }
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
        // Firing alerts observed clear that may be kept firing: decided
        // once every observation is in, as their upgrade's state matters.
        let mut lapsing = Vec::new();
        for observation in observations {
            seen.insert(observation.key.clone());
            if observation.verdict != Verdict::Clear {
                holding.insert(observation.key.clone());
                self.lapsed.remove(&observation.key);
            } else if !observation.keep_firing_for.is_zero() && self.is_firing(&observation.key) {
                let key = observation.key.clone();
                let keep_firing_for = observation.keep_firing_for;
                if let Some(alert) = self.alerts.get_mut(&key) {
                    refresh(alert, now, observation);
                }
                lapsing.push((key, keep_firing_for));
                continue;
            }
            self.apply(now, observation, &mut transitions);
        }
        let unseen: Vec<AlertKey> =
            self.alerts.keys().filter(|key| !seen.contains(*key)).cloned().collect();
        let ending =
            unseen.into_iter().map(|key| (key, Duration::ZERO)).chain(lapsing).collect::<Vec<_>>();
        for (key, keep_firing_for) in ending {
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
                _ if self.keeps_firing(now, &key, keep_firing_for) => {}
                _ => self.clear(now, &key, &mut transitions),
            }
        }
        self.expire(now);
        transitions
    }

    /// Whether `key`'s firing alert, observed clear now, is still within
    /// `keep_firing_for` of the first evaluation that read it clear.
    fn keeps_firing(&mut self, now: Timestamp, key: &AlertKey, keep_firing_for: Duration) -> bool {
        if keep_firing_for.is_zero() || !self.is_firing(key) {
            return false;
        }
        let since = *self.lapsed.entry(key.clone()).or_insert(now);
        now.duration_since(since).unwrap_or_default() < keep_firing_for
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
        self.lapsed.remove(key);
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

    /// Forgets resolved alerts older than the retention, and the lapses
    /// of alerts no longer firing.
    fn expire(&mut self, now: Timestamp) {
        let alerts = &self.alerts;
        self.lapsed.retain(|key, _| {
            alerts.get(key).is_some_and(|alert| alert.state == AlertState::Firing)
        });
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
#[path = "engine_tests.rs"]
mod tests;
