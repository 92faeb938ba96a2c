use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::history::points::ProcessPoint;
use crate::model::AllocatorStats;

fn ts(millis: i64) -> Timestamp {
    Timestamp::from_unix_millis(millis)
}

fn point(at: i64, processes: Option<Vec<ProcessPoint>>, capped: bool) -> SlowPoint {
    SlowPoint::from_parts(ts(at), processes.map(Arc::from), capped)
}

fn stats(seed: u64) -> AllocatorStats {
    AllocatorStats {
        allocated_bytes: seed,
        reserved_bytes: seed.wrapping_mul(3),
        active_bytes: seed.wrapping_add(16 << 20),
        inactive_split_bytes: seed / 7,
        alloc_retries: seed % 5,
        ooms: 0,
        interval: None,
    }
}

fn any_stats() -> impl Strategy<Value = AllocatorStats> {
    (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
        |(allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, retries, ooms)| {
            AllocatorStats {
                allocated_bytes,
                reserved_bytes,
                active_bytes,
                inactive_split_bytes,
                alloc_retries: retries,
                ooms,
                interval: None,
            }
        },
    )
}

fn any_process() -> impl Strategy<Value = ProcessPoint> {
    let used = prop_oneof![Just(None), Just(Some(0)), Just(Some(u64::MAX)), any::<Option<u64>>()];
    (0u32..6, used, proptest::option::of(any_stats()))
        .prop_map(|(pid, used, allocator)| ProcessPoint::new(pid, used, allocator))
}

fn any_samples() -> impl Strategy<Value = Vec<SlowPoint>> {
    let sample = (
        0i64..2_000,
        proptest::option::of(proptest::collection::vec(any_process(), 0..6)),
        any::<bool>(),
    );
    (any::<i64>(), proptest::collection::vec(sample, 1..300)).prop_map(|(start, samples)| {
        let mut at = start / 2;
        samples
            .into_iter()
            .map(|(step, processes, capped)| {
                at = at.saturating_add(step);
                point(at, processes, capped)
            })
            .collect()
    })
}

/// Every process changing on every sample, as on a training host.
fn moving(samples: i64, processes: u32) -> Vec<SlowPoint> {
    (0..samples)
        .map(|i| {
            let list = (0..processes)
                .map(|pid| {
                    let wobble = (i as u64 * 7_919 + u64::from(pid) * 104_729) % 32;
                    let used = (6 << 30) + wobble * (2 << 20);
                    ProcessPoint::new(40_000 + pid, Some(used), None)
                })
                .collect();
            point(1_767_225_600_000 + i * 1_000 + i % 3, Some(list), false)
        })
        .collect()
}

#[test]
fn absent_figures_and_lists_stay_absent() {
    let samples = vec![
        point(0, None, false),
        point(1, Some(vec![ProcessPoint::new(7, None, None)]), true),
        point(2, Some(vec![ProcessPoint::new(7, Some(0), Some(stats(0)))]), false),
        point(3, Some(vec![]), false),
        point(4, Some(vec![ProcessPoint::new(7, None, Some(stats(u64::MAX)))]), false),
    ];
    let chunk = SlowChunk::encode(&samples).unwrap();
    let decoded = chunk.decode().unwrap();
    assert_eq!(decoded, samples);
    assert_eq!(decoded[0].processes(), None, "an unread list is not an empty one");
    assert_eq!(decoded[1].processes().unwrap()[0].used_bytes(), None);
    assert_eq!(decoded[2].processes().unwrap()[0].used_bytes(), Some(0), "zero is a value");
    assert!(decoded[1].capped() && !decoded[2].capped());
    let times: Vec<i64> = chunk.times().unwrap().iter().map(|at| at.unix_millis()).collect();
    assert_eq!(times, [0, 1, 2, 3, 4]);
}

#[test]
fn unchanged_lists_decode_into_one_shared_list() {
    let list = vec![ProcessPoint::new(7, Some(5 << 30), Some(stats(1 << 30)))];
    let samples: Vec<SlowPoint> =
        (0..64).map(|i| point(i * 1_000, Some(list.clone()), false)).collect();
    let chunk = SlowChunk::encode(&samples).unwrap();
    let decoded = chunk.decode().unwrap();
    let first = decoded[0].shared_processes().unwrap();
    assert!(decoded.iter().all(|p| Arc::ptr_eq(first, p.shared_processes().unwrap())));
    assert!(chunk.encoded_bytes() < 64, "{} bytes for 64 unchanged samples", chunk.encoded_bytes());
}

#[test]
fn moving_processes_cost_under_two_bytes_a_sample() {
    let samples = moving(SLOW_MERGED_LEN as i64, 64);
    let chunk = SlowChunk::encode(&samples).unwrap();
    assert_eq!(chunk.decode().unwrap(), samples);
    let per_sample = chunk.encoded_bytes() as f64 / (64.0 * SLOW_MERGED_LEN as f64);
    assert!(per_sample < 2.0, "{per_sample:.2} bytes per process-sample");
}

#[test]
fn a_full_ring_keeps_its_capacity_and_reads_back_what_was_pushed() {
    let ring = SlowRing::new(300);
    let samples = moving(1_000, 3);
    for sample in &samples {
        ring.push(sample.clone()).unwrap();
        let len = ring.len();
        assert!((300.min(len)..300 + 2 * SLOW_MERGED_LEN).contains(&len), "len {len}");
    }
    let snapshot = ring.snapshot();
    let kept: Vec<SlowPoint> = snapshot.iter().collect();
    assert_eq!(kept[..], samples[samples.len() - kept.len()..]);
    assert_eq!(snapshot.newest().as_ref(), samples.last());
    let (bytes, sealed) = snapshot.sealed_footprint();
    assert!(sealed >= 300 - SLOW_CHUNK_LEN && bytes < sealed * 3 * 2, "{bytes} B, {sealed}");
}

#[test]
fn out_of_order_samples_are_refused() {
    let ring = SlowRing::new(10);
    ring.push(point(5, None, false)).unwrap();
    assert_eq!(ring.push(point(4, None, false)), Err(OutOfOrder { at: ts(4), newest: ts(5) }));
    assert_eq!(ring.len(), 1);
}

proptest! {
    #[test]
    fn any_chunk_round_trips(samples in any_samples()) {
        let chunk = SlowChunk::encode(&samples).unwrap();
        prop_assert_eq!(chunk.len(), samples.len());
        prop_assert_eq!(chunk.decode().unwrap(), samples.clone());
        let times: Vec<Timestamp> = samples.iter().map(SlowPoint::at).collect();
        prop_assert_eq!(chunk.times().unwrap(), times);
    }

    #[test]
    fn merged_chunks_hold_their_parts_samples(
        samples in any_samples(),
        cuts in proptest::collection::vec(1usize..40, 1..8),
    ) {
        let mut parts = Vec::new();
        let mut rest = &samples[..];
        for cut in cuts {
            let (part, after) = rest.split_at(cut.min(rest.len()));
            parts.extend(SlowChunk::encode(part));
            rest = after;
        }
        parts.extend(SlowChunk::encode(rest));
        let merged = SlowChunk::merge(&parts.iter().collect::<Vec<_>>()).unwrap();
        prop_assert_eq!(merged.len(), samples.len());
        prop_assert_eq!((merged.first(), merged.last()), (samples[0].at(), samples[samples.len() - 1].at()));
        prop_assert_eq!(merged.decode().unwrap(), samples);
    }

    #[test]
    fn reads_match_a_linear_filter(
        samples in any_samples(),
        more in any_samples(),
        capacity in 1usize..400,
        from in 0i64..120_000,
        span in 0i64..120_000,
    ) {
        let ring = SlowRing::new(capacity);
        let offset = samples.last().map_or(0, |p| p.at().unix_millis()).max(0);
        let pushed: Vec<SlowPoint> = samples
            .into_iter()
            .chain(more.into_iter().map(|p| {
                let at = p.at().unix_millis().rem_euclid(1 << 20).saturating_add(offset);
                SlowPoint::from_parts(ts(at), p.shared_processes().cloned(), p.capped())
            }))
            .collect();
        let mut accepted = Vec::new();
        for sample in pushed {
            if ring.push(sample.clone()).is_ok() {
                accepted.push(sample);
            }
        }
        let snapshot = ring.snapshot();
        let kept = snapshot.len();
        let tail = &accepted[accepted.len() - kept..];
        prop_assert_eq!(snapshot.iter().collect::<Vec<_>>(), tail.to_vec());
        let (from, to) = (ts(from.saturating_add(offset / 2)), ts(from + span + offset / 2));
        let expected: Vec<SlowPoint> =
            tail.iter().filter(|p| p.at() >= from && p.at() <= to).cloned().collect();
        prop_assert_eq!(snapshot.range(from, to).collect::<Vec<_>>(), expected.clone());
        prop_assert_eq!(snapshot.count_in(from, to), expected.len());
        let mut visited = Vec::new();
        ring.visit_recent(from, to, |p| visited.push(p.clone()));
        prop_assert_eq!(visited, expected);
    }
}

#[test]
fn samples_sharing_one_list_are_sealed_a_merged_chunk_at_a_time() {
    let list: Arc<[ProcessPoint]> = Arc::from(vec![ProcessPoint::new(7, Some(5 << 30), None)]);
    let ring = SlowRing::new(1_000);
    for i in 0..600 {
        ring.push(SlowPoint::from_parts(ts(i * 1_000), Some(list.clone()), false)).unwrap();
    }
    let snapshot = ring.snapshot();
    let lens: Vec<usize> = snapshot.chunks.iter().map(|chunk| chunk.len()).collect();
    assert_eq!(lens, [SLOW_MERGED_LEN, SLOW_MERGED_LEN], "no young chunks to merge");
    assert_eq!(snapshot.open.len(), 600 - 2 * SLOW_MERGED_LEN);
    let moving = SlowRing::new(1_000);
    for sample in moving_samples(600) {
        moving.push(sample).unwrap();
    }
    assert!(moving.snapshot().open.len() < SLOW_CHUNK_LEN, "moving lists are sealed early");
}

fn moving_samples(count: i64) -> Vec<SlowPoint> {
    moving(count, 2)
}
