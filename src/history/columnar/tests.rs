use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::history::points::ProcessPoint;
use crate::model::{AllocatorRange, AllocatorStats};

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
    let figures =
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>());
    let interval = proptest::option::of((any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()));
    (figures, interval).prop_map(
        |(
            (allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, retries, ooms),
            interval,
        )| {
            AllocatorStats {
                allocated_bytes,
                reserved_bytes,
                active_bytes,
                inactive_split_bytes,
                alloc_retries: retries,
                ooms,
                interval: interval.map(
                    |(
                        allocated_min_bytes,
                        allocated_max_bytes,
                        reserved_min_bytes,
                        reserved_max_bytes,
                    )| {
                        AllocatorRange {
                            allocated_min_bytes,
                            allocated_max_bytes,
                            reserved_min_bytes,
                            reserved_max_bytes,
                        }
                    },
                ),
            }
        },
    )
}

fn any_process() -> impl Strategy<Value = ProcessPoint> {
    let used = prop_oneof![Just(None), Just(Some(0)), Just(Some(u64::MAX)), any::<Option<u64>>()];
    let independent = (0u32..6, used, proptest::option::of(any_stats()))
        .prop_map(|(pid, used, allocator)| ProcessPoint::new(pid, used, allocator));
    // Usage a little above the pool, as NVML reports a PyTorch process, so
    // that chunks store it less reserved bytes.
    let above_pool = (0u32..6, 0u64..4, any_stats()).prop_map(|(pid, above, stats)| {
        ProcessPoint::new(pid, Some(stats.reserved_bytes.wrapping_add(above << 21)), Some(stats))
    });
    prop_oneof![independent, above_pool]
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
fn moving_samples_are_merged_level_by_level() {
    // Every list new: sealed every few samples, those merged into chunks of
    // 32, and those into chunks of 256, so no more than 7 chunks wait at
    // either level and the oldest samples sit in full-length chunks.
    let ring = SlowRing::new(1_000);
    for (pushed, sample) in moving_samples(900).into_iter().enumerate() {
        ring.push(sample).unwrap();
        let snapshot = ring.snapshot();
        let lens: Vec<usize> = snapshot.chunks.iter().map(|chunk| chunk.len()).collect();
        let short = lens.iter().filter(|&&len| len < SLOW_MERGE_LEVELS[0]).count();
        let middle = lens.iter().filter(|&&len| len == SLOW_MERGE_LEVELS[0]).count();
        let full = lens.iter().filter(|&&len| len == SLOW_MERGED_LEN).count();
        assert!(short < 8 && middle < 8, "after {} samples: {lens:?}", pushed + 1);
        assert_eq!(full, (pushed + 1) / SLOW_MERGED_LEN, "after {} samples: {lens:?}", pushed + 1);
        assert_eq!(full + middle + short, lens.len(), "{lens:?}");
        assert!(lens.is_sorted_by(|a, b| a >= b), "oldest chunks longest: {lens:?}");
    }
    let kept: Vec<SlowPoint> = ring.snapshot().iter().collect();
    assert_eq!(kept, moving_samples(900));
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
        prop_assert_eq!(&visited, &expected);

        // Figure readers see the same samples, each figure as the whole
        // sample holds it, whichever figures are asked for.
        let rows = |figures| -> Vec<FigureRead<3>> {
            expected
                .iter()
                .map(|p| (p.at(), p.capped(), p.processes().map(|list| {
                    let mut rows = Vec::new();
                    figures::rows_of(list, figures, &mut rows);
                    rows
                })))
                .collect()
        };
        for figures in FIGURE_CHOICES {
            let mut read = Vec::new();
            snapshot.visit_figures(from, to, figures, |sample| read.push(owned(sample)));
            prop_assert_eq!(&read, &rows(figures));
            read.clear();
            ring.visit_recent_figures(from, to, figures, |sample| read.push(owned(sample)));
            prop_assert_eq!(&read, &rows(figures));
        }
    }
}

type FigureRead<const N: usize> = (Timestamp, bool, Option<Vec<FigureRow<N>>>);

fn owned<const N: usize>(sample: &FigureSample<'_, N>) -> FigureRead<N> {
    (sample.at, sample.capped, sample.processes.map(<[_]>::to_vec))
}

/// Every figure at least once, alone and beside others (active with and
/// without allocated, which it is stored against).
const FIGURE_CHOICES: [[ProcessFigure; 3]; 4] = {
    use ProcessFigure::*;
    [
        [AllocatedFloor, NvmlUsed, Reserved],
        [NvmlUsed, Allocated, Active],
        [Active, Reserved, Ooms],
        [InactiveSplit, AllocRetries, NvmlUsed],
    ]
};

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

/// A well-mixed number, so the figures below follow no pattern a codec
/// could exploit and a real host would not.
fn mix(sample: u64, pid: u32) -> u64 {
    let mut x = sample.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(pid).rotate_left(32);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 27)
}

/// Every figure of every process moving as on a training host (as
/// `benches/history_memory.rs` "moving" does): NVML usage by 0–31 pages,
/// live bytes anywhere in 8 MiB at 512-byte blocks, active 16 MiB above
/// them, reserved stepping by 128 MiB every 30 s, the inactive split every
/// 10 s, a retry every 10 min.
fn training(samples: u64, processes: u32) -> Vec<SlowPoint> {
    const MIB: u64 = 1 << 20;
    (0..samples)
        .map(|sample| {
            let list = (0..processes)
                .map(|slot| {
                    let pid = 100_000 + slot;
                    let base = 700 * MIB + u64::from(slot * 17) * MIB;
                    let reserved = base + ((sample / 30 + u64::from(slot)) % 4) * 128 * MIB;
                    let allocated = reserved / 2 + (mix(sample, pid) % 16_384) * 512;
                    let stats = AllocatorStats {
                        allocated_bytes: allocated,
                        reserved_bytes: reserved,
                        active_bytes: allocated + 16 * MIB,
                        inactive_split_bytes: ((sample / 10 + u64::from(slot)) % 16) * MIB,
                        alloc_retries: sample / 600,
                        ooms: 0,
                        interval: None,
                    };
                    let used = reserved + 500 * MIB + (mix(sample, !pid) % 32) * 2 * MIB;
                    ProcessPoint::new(pid, Some(used), Some(stats))
                })
                .collect();
            point(1_767_225_600_000 + sample as i64 * 1_000, Some(list), false)
        })
        .collect()
}

#[test]
fn a_training_host_costs_under_3_05_bytes_a_process_sample_sealed() {
    // Entropy alone is 19 bits a process-sample (5 for NVML usage, 14 for
    // live bytes): 2.4 bytes. Differences and order 2 alone took 3.97, and
    // NVML usage stored for itself rather than less reserved bytes 3.10.
    let samples = training(SLOW_MERGED_LEN as u64 * 4, 64);
    let mut bytes = 0;
    for part in samples.chunks(SLOW_MERGED_LEN) {
        let chunk = SlowChunk::encode(part).unwrap();
        assert_eq!(chunk.decode().unwrap(), part);
        bytes += chunk.encoded_bytes();
    }
    let per_sample = bytes as f64 / (64.0 * samples.len() as f64);
    assert!(per_sample < 3.05, "{per_sample:.3} bytes per process-sample");
}

#[test]
fn usage_that_follows_the_pool_costs_only_its_own_moves() {
    // The pool jumps anywhere on every sample; NVML usage is the pool plus
    // a fixed CUDA context. Stored less reserved, usage holds still.
    let samples = |with_usage: bool| -> Vec<SlowPoint> {
        (0..SLOW_MERGED_LEN as u64)
            .map(|sample| {
                let list = (0..8u32)
                    .map(|pid| {
                        let reserved = (1 << 30) + (mix(sample, pid) % 4_096) * (2 << 20);
                        let stats = AllocatorStats { reserved_bytes: reserved, ..stats(1 << 30) };
                        let used = with_usage.then_some(reserved + (500 << 20));
                        ProcessPoint::new(pid, used, Some(stats))
                    })
                    .collect();
                point(sample as i64 * 1_000, Some(list), false)
            })
            .collect()
    };
    let (with, without) = (samples(true), samples(false));
    let (chunk, bare) = (SlowChunk::encode(&with).unwrap(), SlowChunk::encode(&without).unwrap());
    assert_eq!(chunk.decode().unwrap(), with);
    let added = chunk.encoded_bytes() - bare.encoded_bytes();
    assert!(added <= 8 * 8, "usage added {added} bytes for 8 processes");

    // Merged from parts, and read figure by figure, it is the same usage.
    let parts: Vec<SlowChunk> = with.chunks(40).filter_map(SlowChunk::encode).collect();
    let merged = SlowChunk::merge(&parts.iter().collect::<Vec<_>>()).unwrap();
    assert_eq!(merged.decode().unwrap(), with);
    assert!(merged.encoded_bytes() <= chunk.encoded_bytes() + 8);
    let mut usage = Vec::new();
    let (from, to) = (with[0].at(), with[with.len() - 1].at());
    merged.visit_figures([ProcessFigure::NvmlUsed], from, to, &mut |sample| {
        usage.extend(sample.processes.unwrap_or(&[]).iter().map(|row| row.values[0]));
    });
    let expected: Vec<Option<u64>> = with
        .iter()
        .flat_map(|point| point.processes().unwrap_or(&[]).iter().map(ProcessPoint::used_bytes))
        .collect();
    assert_eq!(usage, expected);
}

#[test]
fn usage_stored_less_reserved_reads_back_through_every_reader() {
    // Chunks long enough to weigh usage less reserved (the merged ones),
    // with interval ranges on some samples so the floor is read too.
    let samples: Vec<SlowPoint> = (0..700u64)
        .map(|sample| {
            let list = (0..3u32)
                .map(|pid| {
                    let reserved = (2 << 30) + (mix(sample, pid) % 512) * (2 << 20);
                    let mut stats = AllocatorStats { reserved_bytes: reserved, ..stats(sample) };
                    if sample % 3 == 0 {
                        stats.interval = Some(AllocatorRange {
                            allocated_min_bytes: stats.allocated_bytes / 2,
                            allocated_max_bytes: stats.allocated_bytes,
                            reserved_min_bytes: reserved / 2,
                            reserved_max_bytes: reserved,
                        });
                    }
                    ProcessPoint::new(pid, Some(reserved + (300 << 20)), Some(stats))
                })
                .collect();
            point(sample as i64 * 1_000, Some(list), false)
        })
        .collect();
    let ring = SlowRing::new(1_000);
    for sample in &samples {
        ring.push(sample.clone()).unwrap();
    }
    let snapshot = ring.snapshot();
    assert_eq!(snapshot.iter().collect::<Vec<_>>(), samples);
    for (from, to) in [(0, 700_000), (100_500, 300_000), (511_000, 512_000), (690_000, 699_000)] {
        let (from, to) = (ts(from), ts(to));
        let expected: Vec<&SlowPoint> =
            samples.iter().filter(|p| p.at() >= from && p.at() <= to).collect();
        for figures in FIGURE_CHOICES {
            let rows: Vec<FigureRead<3>> = expected
                .iter()
                .map(|p| {
                    let mut rows = Vec::new();
                    figures::rows_of(p.processes().unwrap_or(&[]), figures, &mut rows);
                    (p.at(), p.capped(), Some(rows))
                })
                .collect();
            let mut read = Vec::new();
            snapshot.visit_figures(from, to, figures, |sample| read.push(owned(sample)));
            assert_eq!(read, rows, "{figures:?} over {from:?}..{to:?}");
        }
    }
}
