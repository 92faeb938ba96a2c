//! Contexts, memory info, allocations and their faults, and the call log
//! that shows what was released: the fake library driven through the real
//! `cuda-driver` crate, one child process per test (see common/mod.rs).

mod common;

use std::time::{Duration, Instant};

use common::{Fixture, GIB, MIB, child_part, in_child, one_device};
use cuda_driver::MemoryInfo;
use serde_json::json;

const TOTAL: u64 = 85_899_345_920;
const FREE: u64 = 80_000_000_000;
const CONTEXT: u64 = 512 * MIB;

fn h100() -> serde_json::Value {
    one_device(json!({ "total_bytes": TOTAL, "free_bytes": FREE, "context_bytes": CONTEXT }))
}

#[test]
fn a_context_lowers_free_by_context_bytes_until_dropped() {
    let log = in_child("a_context_lowers_free_by_context_bytes_until_dropped", h100(), |driver| {
        driver.init().unwrap();
        let device = driver.device(0).unwrap();
        let context = driver.create_context(device).unwrap();
        let with_one = MemoryInfo { free_bytes: FREE - CONTEXT, total_bytes: TOTAL };
        assert_eq!(context.memory_info().unwrap(), with_one);
        let second = driver.create_context(device).unwrap();
        assert_eq!(second.memory_info().unwrap().free_bytes, FREE - 2 * CONTEXT);
        second.synchronize().unwrap();
        second.destroy().unwrap();
        assert_eq!(context.memory_info().unwrap(), with_one);
        drop(context);
        // Dropping gave the first context's memory back as well.
        let again = driver.create_context(device).unwrap();
        assert_eq!(again.memory_info().unwrap(), with_one);
    });
    assert_eq!(
        log,
        [
            "cuInit ok",
            "cuDeviceGet ok",
            "cuCtxCreate_v2 ok",
            "cuMemGetInfo_v2 ok",
            "cuCtxCreate_v2 ok",
            "cuMemGetInfo_v2 ok",
            "cuCtxSynchronize ok",
            "cuCtxDestroy_v2 ok",
            "cuMemGetInfo_v2 ok",
            "cuCtxDestroy_v2 ok",
            "cuCtxCreate_v2 ok",
            "cuMemGetInfo_v2 ok",
            "cuCtxDestroy_v2 ok",
        ]
    );
}

#[test]
fn allocations_lower_free_and_freeing_or_dropping_restores_it() {
    let test = "allocations_lower_free_and_freeing_or_dropping_restores_it";
    let log = in_child(test, h100(), |driver| {
        driver.init().unwrap();
        let context = driver.create_context(driver.device(0).unwrap()).unwrap();
        let start = context.memory_info().unwrap().free_bytes;
        let first = context.allocate(GIB).unwrap();
        let second = context.allocate(3 * GIB).unwrap();
        assert_eq!((first.bytes(), second.bytes()), (GIB, 3 * GIB));
        assert_eq!(context.memory_info().unwrap().free_bytes, start - 4 * GIB);
        first.free().unwrap();
        assert_eq!(context.memory_info().unwrap().free_bytes, start - 3 * GIB);
        drop(second);
        assert_eq!(context.memory_info().unwrap().free_bytes, start);
        let zero = context.allocate(0).unwrap_err();
        assert_eq!((zero.code, zero.name.as_str()), (1, "CUDA_ERROR_INVALID_VALUE"));
    });
    assert_eq!(
        log,
        [
            "cuInit ok",
            "cuDeviceGet ok",
            "cuCtxCreate_v2 ok",
            "cuMemGetInfo_v2 ok",
            "cuMemAlloc_v2 ok",
            "cuMemAlloc_v2 ok",
            "cuMemGetInfo_v2 ok",
            "cuMemFree_v2 ok",
            "cuMemGetInfo_v2 ok",
            "cuMemFree_v2 ok",
            "cuMemGetInfo_v2 ok",
            "cuMemAlloc_v2 1",
            "cuCtxDestroy_v2 ok",
        ]
    );
}

#[test]
fn allocations_above_free_or_max_alloc_bytes_are_out_of_memory() {
    let scenario = one_device(json!({
        "total_bytes": 16 * GIB,
        "free_bytes": 10 * GIB,
        "context_bytes": GIB,
        "max_alloc_bytes": 4 * GIB
    }));
    let test = "allocations_above_free_or_max_alloc_bytes_are_out_of_memory";
    let log = in_child(test, scenario, |driver| {
        driver.init().unwrap();
        let context = driver.create_context(driver.device(0).unwrap()).unwrap();
        assert_eq!(context.memory_info().unwrap().free_bytes, 9 * GIB);
        let too_large = context.allocate(4 * GIB + 1).unwrap_err();
        assert!(too_large.is_out_of_memory(), "{too_large}");
        assert_eq!(too_large.to_string(), "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)");
        let _a = context.allocate(4 * GIB).unwrap();
        let _b = context.allocate(4 * GIB).unwrap();
        assert!(context.allocate(GIB + 1).unwrap_err().is_out_of_memory());
        let _c = context.allocate(GIB).unwrap();
        assert_eq!(context.memory_info().unwrap().free_bytes, 0);
        assert!(context.allocate(1).unwrap_err().is_out_of_memory());
    });
    let allocations: Vec<&str> =
        log.iter().filter(|line| line.starts_with("cuMemAlloc_v2")).map(String::as_str).collect();
    assert_eq!(
        allocations,
        [
            "cuMemAlloc_v2 2",
            "cuMemAlloc_v2 ok",
            "cuMemAlloc_v2 ok",
            "cuMemAlloc_v2 2",
            "cuMemAlloc_v2 ok",
            "cuMemAlloc_v2 2"
        ]
    );
    let frees = log.iter().filter(|line| *line == "cuMemFree_v2 ok").count();
    assert_eq!(frees, 3, "{log:?}");
    assert_eq!(log.last().unwrap(), "cuCtxDestroy_v2 ok");
}

#[test]
fn context_error_alloc_error_and_too_little_memory_for_a_context() {
    let scenario = json!({ "devices": [
        { "context_error": 216 },
        { "alloc_error": 2 },
        { "total_bytes": GIB, "free_bytes": 100 * MIB, "context_bytes": 512 * MIB }
    ]});
    let test = "context_error_alloc_error_and_too_little_memory_for_a_context";
    let log = in_child(test, scenario, |driver| {
        driver.init().unwrap();
        let error = driver.create_context(driver.device(0).unwrap()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cuCtxCreate_v2 failed: CUDA_ERROR_CONTEXT_ALREADY_IN_USE (216)"
        );
        let context = driver.create_context(driver.device(1).unwrap()).unwrap();
        let error = context.allocate(MIB).unwrap_err();
        assert!(error.is_out_of_memory() && error.call == "cuMemAlloc_v2");
        drop(context);
        let error = driver.create_context(driver.device(2).unwrap()).unwrap_err();
        assert!(error.is_out_of_memory() && error.call == "cuCtxCreate_v2");
    });
    assert_eq!(
        log,
        [
            "cuInit ok",
            "cuDeviceGet ok",
            "cuCtxCreate_v2 216",
            "cuDeviceGet ok",
            "cuCtxCreate_v2 ok",
            "cuMemAlloc_v2 2",
            "cuCtxDestroy_v2 ok",
            "cuDeviceGet ok",
            "cuCtxCreate_v2 2",
        ]
    );
}

#[test]
fn destroying_a_context_releases_what_was_not_freed() {
    let log = in_child("destroying_a_context_releases_what_was_not_freed", h100(), |driver| {
        driver.init().unwrap();
        let device = driver.device(0).unwrap();
        let context = driver.create_context(device).unwrap();
        std::mem::forget(context.allocate(8 * GIB).unwrap());
        assert_eq!(context.memory_info().unwrap().free_bytes, FREE - CONTEXT - 8 * GIB);
        context.destroy().unwrap();
        let context = driver.create_context(device).unwrap();
        assert_eq!(context.memory_info().unwrap().free_bytes, FREE - CONTEXT);
    });
    // The log shows the leak: an allocation with no cuMemFree_v2.
    let count = |prefix: &str| log.iter().filter(|line| line.starts_with(prefix)).count();
    assert_eq!((count("cuMemAlloc_v2 ok"), count("cuMemFree_v2")), (1, 0));
    assert_eq!(count("cuCtxCreate_v2 ok"), count("cuCtxDestroy_v2 ok"));
}

#[test]
fn alloc_delay_slows_every_allocation() {
    let scenario = one_device(json!({ "alloc_delay_us": 150_000 }));
    in_child("alloc_delay_slows_every_allocation", scenario, |driver| {
        driver.init().unwrap();
        let context = driver.create_context(driver.device(0).unwrap()).unwrap();
        let start = Instant::now();
        let _a = context.allocate(MIB).unwrap();
        let _b = context.allocate(MIB).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(300), "{:?}", start.elapsed());
        let start = Instant::now();
        context.memory_info().unwrap();
        assert!(start.elapsed() < Duration::from_millis(150));
    });
}

#[test]
fn hang_in_cu_mem_alloc_never_returns() {
    let test = "hang_in_cu_mem_alloc_never_returns";
    child_part(test, |driver| {
        driver.init().unwrap();
        let context = driver.create_context(driver.device(0).unwrap()).unwrap();
        let _ = context.allocate(MIB);
    });
    let fixture = Fixture::new(one_device(json!({ "hang": "cuMemAlloc_v2" })));
    fixture.expect_hang(test, "cuMemAlloc_v2");
    let log = cuda_fake::harness::read_log(&fixture.log);
    assert_eq!(log, ["cuInit ok", "cuDeviceGet ok", "cuCtxCreate_v2 ok", "cuMemAlloc_v2 hang"]);
}
