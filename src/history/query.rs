//! Window queries over a device's fast-tier history, raw or downsampled.
//!
//! Downsampling keeps min, max and last per bucket so a spike inside a
//! bucket survives a coarse `step`.

use std::time::Duration;

use crate::model::Timestamp;

use super::points::FastPoint;
use super::ring::{Snapshot, Span};

/// What a caller asks for: the window ending at the newest sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowQuery {
    /// How far back from the newest sample.
    pub window: Duration,
    /// Bucket width; `None` returns every sample.
    pub step: Option<Duration>,
    /// Most points (samples or buckets) the answer may hold.
    pub max_points: usize,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum QueryError {
    #[error(
        "the window holds {count} samples, more than the limit of {max}; ask for a step of at least {suggested_step_ms} ms"
    )]
    TooManyPoints { count: usize, max: usize, suggested_step_ms: u64 },
    #[error(
        "a step of {step_ms} ms over a window of {window_ms} ms makes {buckets} buckets, more than the limit of {max}"
    )]
    TooManyBuckets { buckets: u64, max: usize, step_ms: u64, window_ms: u64 },
    #[error("step must be at least 1 ms")]
    ZeroStep,
}

/// Min, max and last of one quantity in a bucket.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct Aggregate<T> {
    pub min: T,
    pub max: T,
    pub last: T,
}

fn fold<T: Copy + PartialOrd>(slot: &mut Option<Aggregate<T>>, value: Option<T>) {
    let Some(value) = value else { return };
    let aggregate = slot.get_or_insert(Aggregate { min: value, max: value, last: value });
    if value < aggregate.min {
        aggregate.min = value;
    }
    if value > aggregate.max {
        aggregate.max = value;
    }
    aggregate.last = value;
}

/// One downsampled bucket `[start, start + step)`.
// Served as it is by `GET /api/v1/devices/{gpu}/history`, as `BucketDto`.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, serde::Serialize, utoipa::ToSchema)]
#[schema(as = BucketDto)]
pub struct Bucket {
    #[serde(with = "crate::model::rfc3339")]
    #[schema(value_type = String)]
    pub start: Timestamp,
    pub samples: u32,
    pub total_bytes: Option<Aggregate<u64>>,
    pub reserved_bytes: Option<Aggregate<u64>>,
    pub used_bytes: Option<Aggregate<u64>>,
    pub free_bytes: Option<Aggregate<u64>>,
    #[serde(rename = "gpu_utilization_ratio")]
    pub gpu_utilization: Option<Aggregate<f64>>,
    #[serde(rename = "memory_bandwidth_utilization_ratio")]
    pub memory_bandwidth_utilization: Option<Aggregate<f64>>,
}

impl Bucket {
    fn empty(start: Timestamp) -> Self {
        Self {
            start,
            samples: 0,
            used_bytes: None,
            free_bytes: None,
            reserved_bytes: None,
            total_bytes: None,
            gpu_utilization: None,
            memory_bandwidth_utilization: None,
        }
    }

    fn add(&mut self, point: &FastPoint) {
        self.samples = self.samples.saturating_add(1);
        let memory = point.memory();
        fold(&mut self.used_bytes, memory.map(|m| m.used_bytes));
        fold(&mut self.free_bytes, memory.map(|m| m.free_bytes));
        fold(&mut self.reserved_bytes, memory.and_then(|m| m.reserved_bytes));
        fold(&mut self.total_bytes, memory.map(|m| m.total_bytes));
        fold(&mut self.gpu_utilization, point.gpu_utilization());
        fold(&mut self.memory_bandwidth_utilization, point.memory_bandwidth_utilization());
    }
}

/// The samples of a raw window, left in the snapshot they were found in:
/// a window of `api.max_history_points` samples is read straight from the
/// ring's shared chunks as it is written out, never copied whole (issue 35:
/// 64 such copies, with their JSON, held over a gigabyte at once).
#[derive(Clone)]
pub struct RawPoints {
    snapshot: Snapshot<FastPoint>,
    spans: Vec<Span>,
    len: usize,
}

impl RawPoints {
    fn new(snapshot: Snapshot<FastPoint>, from: Timestamp, to: Timestamp) -> Self {
        let spans = snapshot.range_spans(from, to);
        let len = spans.iter().map(Span::len).sum();
        Self { snapshot, spans, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = &FastPoint> {
        self.spans.iter().flat_map(|span| self.snapshot.span(span))
    }

    /// The samples one at a time, oldest first, owning what it reads: a
    /// response body holds it across reads of its client.
    pub fn into_cursor(self) -> PointCursor {
        PointCursor { points: self, span: 0, offset: 0 }
    }
}

impl PartialEq for RawPoints {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for RawPoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The samples of a [`RawPoints`] in order; its place is (span, offset).
pub struct PointCursor {
    points: RawPoints,
    span: usize,
    offset: usize,
}

impl PointCursor {
    fn peek(&self) -> Option<FastPoint> {
        let span = self.points.spans.get(self.span)?;
        self.points.snapshot.span(span).get(self.offset).copied()
    }
}

impl Iterator for PointCursor {
    type Item = FastPoint;

    fn next(&mut self) -> Option<FastPoint> {
        let point = self.peek()?;
        self.offset += 1;
        if self.points.spans.get(self.span).is_some_and(|span| self.offset >= span.len()) {
            self.span += 1;
            self.offset = 0;
        }
        Some(point)
    }
}

/// The buckets of a downsampled window, made one at a time from the
/// window's samples as they are read, so an answer of many buckets holds
/// one bucket, not all of them.
#[derive(Clone, PartialEq)]
pub struct Buckets {
    points: RawPoints,
    step_millis: i64,
}

impl Buckets {
    pub fn into_cursor(self) -> BucketCursor {
        BucketCursor { points: self.points.into_cursor(), step_millis: self.step_millis }
    }

    /// Every bucket at once, for a caller that wants them all anyway.
    pub fn to_vec(&self) -> Vec<Bucket> {
        self.clone().into_cursor().collect()
    }
}

impl std::fmt::Debug for Buckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.to_vec()).finish()
    }
}

/// The buckets of a [`Buckets`] in order. Buckets are aligned to multiples
/// of the step since the epoch; those without samples are left out.
pub struct BucketCursor {
    points: PointCursor,
    step_millis: i64,
}

impl Iterator for BucketCursor {
    type Item = Bucket;

    fn next(&mut self) -> Option<Bucket> {
        let first = self.points.next()?;
        let millis = first.at().unix_millis();
        let start = millis - millis.rem_euclid(self.step_millis);
        let end = start.saturating_add(self.step_millis);
        let mut bucket = Bucket::empty(Timestamp::from_unix_millis(start));
        bucket.add(&first);
        while let Some(point) = self.points.peek().filter(|point| point.at().unix_millis() < end) {
            bucket.add(&point);
            self.points.next();
        }
        Some(bucket)
    }
}

/// The answer to a [`WindowQuery`].
#[derive(Clone, Debug, PartialEq)]
pub enum WindowAnswer {
    Raw {
        from: Timestamp,
        to: Timestamp,
        points: RawPoints,
    },
    Downsampled {
        from: Timestamp,
        to: Timestamp,
        step: Duration,
        buckets: Buckets,
    },
    /// No samples yet.
    Empty,
}

/// Runs `query` over `snapshot`. Buckets are aligned to multiples of `step`
/// since the epoch, so repeated queries return stable bucket boundaries;
/// buckets without samples are left out. The answer holds the snapshot:
/// its samples and buckets are read as the caller walks them.
pub fn run(snapshot: Snapshot<FastPoint>, query: &WindowQuery) -> Result<WindowAnswer, QueryError> {
    let Some(newest) = snapshot.newest() else {
        return Ok(WindowAnswer::Empty);
    };
    let to = newest.at();
    let from = to.saturating_sub(query.window);
    let window_ms = u64::try_from(query.window.as_millis()).unwrap_or(u64::MAX);
    let Some(step) = query.step else {
        let points = RawPoints::new(snapshot, from, to);
        let count = points.len();
        if count > query.max_points {
            let suggested_step_ms = window_ms.div_ceil(query.max_points as u64).max(1);
            return Err(QueryError::TooManyPoints {
                count,
                max: query.max_points,
                suggested_step_ms,
            });
        }
        return Ok(WindowAnswer::Raw { from, to, points });
    };
    let step_ms = u64::try_from(step.as_millis()).unwrap_or(u64::MAX);
    if step_ms == 0 {
        return Err(QueryError::ZeroStep);
    }
    let buckets_needed = window_ms / step_ms + 1;
    if buckets_needed > query.max_points as u64 {
        return Err(QueryError::TooManyBuckets {
            buckets: buckets_needed,
            max: query.max_points,
            step_ms,
            window_ms,
        });
    }
    let step_millis = i64::try_from(step_ms).unwrap_or(i64::MAX);
    let buckets = Buckets { points: RawPoints::new(snapshot, from, to), step_millis };
    Ok(WindowAnswer::Downsampled { from, to, step, buckets })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::ring::Ring;
    use crate::model::{FastReading, MemoryInfo};

    fn point(millis: i64, used: u64) -> FastPoint {
        FastPoint::from(&FastReading {
            at: Timestamp::from_unix_millis(millis),
            memory: Some(MemoryInfo {
                total_bytes: 1_000,
                reserved_bytes: Some(10),
                used_bytes: used,
                free_bytes: 990 - used,
            }),
            gpu_utilization: Some(0.25),
            memory_bandwidth_utilization: None,
        })
    }

    fn ring_of(points: &[(i64, u64)]) -> Ring<FastPoint> {
        let ring = Ring::new(10_000);
        for &(at, used) in points {
            ring.push(point(at, used)).unwrap();
        }
        ring
    }

    #[test]
    fn raw_window_ends_at_the_newest_sample() {
        let ring = ring_of(&[(0, 1), (1_000, 2), (2_000, 3), (3_000, 4)]);
        let query = WindowQuery { window: Duration::from_secs(2), step: None, max_points: 100 };
        let WindowAnswer::Raw { from, to, points } = run(ring.snapshot(), &query).unwrap() else {
            panic!("expected raw points");
        };
        assert_eq!((from.unix_millis(), to.unix_millis()), (1_000, 3_000));
        let used: Vec<_> = points.iter().filter_map(FastPoint::used_bytes).collect();
        assert_eq!(used, vec![2, 3, 4]);
    }

    #[test]
    fn downsampling_keeps_a_spike_as_the_bucket_max() {
        let samples: Vec<(i64, u64)> =
            (0..100).map(|i| (i * 100, if i == 37 { 900 } else { 100 })).collect();
        let ring = ring_of(&samples);
        let query = WindowQuery {
            window: Duration::from_secs(60),
            step: Some(Duration::from_secs(1)),
            max_points: 100,
        };
        let WindowAnswer::Downsampled { buckets, .. } = run(ring.snapshot(), &query).unwrap()
        else {
            panic!("expected buckets");
        };
        let buckets = buckets.to_vec();
        assert_eq!(buckets.len(), 10);
        assert!(buckets.iter().all(|bucket| bucket.samples == 10));
        let spike = &buckets[3];
        assert_eq!(spike.start.unix_millis(), 3_000);
        assert_eq!(spike.used_bytes, Some(Aggregate { min: 100, max: 900, last: 100 }));
        assert_eq!(buckets[4].used_bytes.map(|a| a.max), Some(100));
        assert_eq!(spike.reserved_bytes.map(|a| a.last), Some(10));
        assert_eq!(spike.gpu_utilization.map(|a| a.max), Some(0.25));
        assert_eq!(spike.memory_bandwidth_utilization, None, "absent stays absent");
    }

    #[test]
    fn too_many_raw_points_suggests_a_step() {
        let samples: Vec<(i64, u64)> = (0..1_000).map(|i| (i * 100, 1)).collect();
        let ring = ring_of(&samples);
        let query = WindowQuery { window: Duration::from_secs(100), step: None, max_points: 100 };
        assert_eq!(
            run(ring.snapshot(), &query),
            Err(QueryError::TooManyPoints { count: 1_000, max: 100, suggested_step_ms: 1_000 })
        );
    }

    #[test]
    fn too_fine_a_step_is_refused_before_any_work() {
        let ring = ring_of(&[(0, 1)]);
        let query = WindowQuery {
            window: Duration::from_secs(3_600),
            step: Some(Duration::from_millis(1)),
            max_points: 1_000,
        };
        assert!(matches!(run(ring.snapshot(), &query), Err(QueryError::TooManyBuckets { .. })));
    }

    #[test]
    fn empty_history_answers_empty() {
        let ring: Ring<FastPoint> = Ring::new(10);
        let query = WindowQuery { window: Duration::from_secs(1), step: None, max_points: 1 };
        assert_eq!(run(ring.snapshot(), &query), Ok(WindowAnswer::Empty));
    }
}
