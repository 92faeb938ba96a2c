//! One alert per leak: what a held leak carries from one check to the
//! next, and the hold it bridges on when no window's own rules show it.
//!
//! Owns: [`Hold`] (the evidence a called leak hands the next check) and
//! [`bridge`]. Depends on: `analysis::floor` (the floor with dips left out),
//! `leak::{density, rules}` and the parameters. Pure; no I/O, no clocks:
//! time is the series' own.
//!
//! Why carried evidence: each check judges only the windows ending at its
//! newest sample. A young leak is called on a short window while the
//! longer ones, still mostly flat before the onset, do not show it yet;
//! an evaluation dip, a partly masked dip edge or a kept checkpoint step
//! then breaks the short window's rules for a check or two, and with them
//! the hold, and the alert resolved and fired again (one page lost and
//! resent). What the previous checks established (where the floor stood
//! when the leak was called, and where it had climbed to) is evidence too:
//! the leak is held while its floor, dips left out as the raising
//! judgement leaves them out, still rises and has not come back to where
//! it began. Bounded: only within `dip_longest` of the last check whose
//! window rules showed the leak. An evaluation dip lasts no longer, so a
//! leak whose windows fail for longer has stopped (growth gone for the
//! hold period) and is let go, as is one whose memory came back.

use std::time::Duration;

use crate::model::Timestamp;

use super::super::floor::{FloorLine, FloorScratch};
use super::rules::{at_least, dips};
use super::{LeakEvidence, LeakParams, density};

/// What a held leak carries to the next check: where its floor began and
/// how far it had climbed by the checks whose window rules showed it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hold {
    /// The check that called the leak.
    pub called_at: Timestamp,
    /// The newest check whose window rules (call or hold) showed it.
    pub confirmed_at: Timestamp,
    /// The longest window that showed it: whose baseline is kept.
    pub window: Duration,
    /// The floor before the rise, on that window (the first to show it
    /// where none was longer): where a leak let go has come back to.
    pub baseline_bytes: u64,
    /// The highest the floor's line stood at a check that showed it.
    pub confirmed_bytes: u64,
}

impl Hold {
    /// The hold after a check at `now` whose window rules showed
    /// `evidence`, on top of what the last check carried (`carried`).
    pub fn confirmed(evidence: &LeakEvidence, now: Timestamp, carried: Option<&Hold>) -> Self {
        let window = Duration::from_secs_f64(evidence.window_seconds.max(0.0));
        let fresh = Self {
            called_at: now,
            confirmed_at: now,
            window,
            baseline_bytes: evidence.baseline_bytes,
            confirmed_bytes: evidence.latest_bytes,
        };
        let Some(carried) = carried else { return fresh };
        // A shorter window's baseline is its own first tenth: on a leak
        // already called, a point of the climb (or an evaluation's low).
        let longer = window >= carried.window;
        Self {
            called_at: carried.called_at,
            confirmed_at: now,
            window: window.max(carried.window),
            baseline_bytes: if longer { evidence.baseline_bytes } else { carried.baseline_bytes },
            confirmed_bytes: evidence.latest_bytes.max(carried.confirmed_bytes),
        }
    }
}

/// Whether a held leak whose windows all failed at the newest sample is
/// held on what the checks before carried: the last check that showed
/// the leak lies within `dip_longest`; and on a span of `dip_longest` (a
/// dip has floor on either side of it) or one of its doublings up to `window`,
/// the floor with dips left out (one still open at its end too) rises at
/// `hold_slope_bytes_per_second` or more, its newest quarter standing
/// above the carried baseline by more than `return_share` of the carried
/// growth. Several spans, as the call judges several windows: a young
/// leak's rise is all of a short span and little of the full window's,
/// and a dip may take a whole quarter of a short span. The line that
/// held (else the longest read), its span and whether it holds; `None`
/// where the bridge is not tried or no span could be read.
///
/// A leak shown at one check only (its call) is carried only on a span
/// the process covers as the call's windows are covered (`covered`: from
/// its start plus the warm-up grace; a younger process's span reads its
/// load as growth, seed 64, dipping run 7, six minutes in) and whose
/// floor had a dip left out: a call alone is little evidence, and a
/// benign floor's chance call must not be carried into an alert (seed 1,
/// run 177, when any call was carried), but a dip that follows a young
/// leak's call breaks every window at the next check (the short ones climb
/// out of it and read as levelling off, the longer ones read its low as a
/// return) and, with no carry, the alert was let go and called again a
/// check or more later: 1 MiB/s leaks through evaluation dips fired 10-13
/// min after their onset instead of 4-5 (seeds 4, 7 and 10).
pub(super) fn bridge(
    scratch: &mut FloorScratch,
    series: &[(Timestamp, u64)],
    hold: &Hold,
    covered: Duration,
    params: &LeakParams,
) -> Option<(FloorLine, Duration, bool)> {
    let &(now, _) = series.last()?;
    let since = now.duration_since(hold.confirmed_at)?;
    if since > params.dip_longest {
        return None;
    }
    let called_once = hold.confirmed_at <= hold.called_at;
    let (baseline, confirmed) = (hold.baseline_bytes as f64, hold.confirmed_bytes as f64);
    let kept = baseline + params.return_share * (confirmed - baseline).max(0.0);
    let mut read = None;
    let mut span = params.dip_longest.min(params.window);
    while !span.is_zero() {
        let from = now.saturating_sub(span);
        let line = density::buckets(series, from, params).and_then(|buckets| {
            scratch.line_without_dips(series, from, buckets, dips(params, true))
        });
        if let Some(line) = line {
            let holds = at_least(line.slope, params.hold_slope_bytes_per_second)
                && line.quarters[3] > kept
                && (!called_once || (span <= covered && scratch.left_out_dips()));
            if holds {
                return Some((line, span, true));
            }
            read = Some((line, span, false));
        }
        if span >= params.window {
            break;
        }
        span = span.saturating_mul(2).min(params.window);
    }
    read
}
