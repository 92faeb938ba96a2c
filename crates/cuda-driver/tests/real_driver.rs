//! A smoke test against the real driver, for machines with an NVIDIA GPU:
//! `cargo test -p cuda-driver -- --ignored`. CI (no GPU) skips it; the
//! fake library's tests (`tests/fake-cuda`) cover the same calls there.

use cuda_driver::{DEFAULT_LIBRARY, Driver, format_uuid};

#[test]
#[ignore = "needs an NVIDIA GPU and its driver (libcuda.so.1)"]
fn the_real_driver_answers_every_call() {
    let driver = Driver::load(DEFAULT_LIBRARY.as_ref()).unwrap();
    driver.init().unwrap();
    assert!(driver.driver_version().unwrap() >= 3020);
    assert!(driver.device_count().unwrap() >= 1);
    let device = driver.device(0).unwrap();
    let uuid = format_uuid("GPU", &driver.device_uuid(device).unwrap());
    let name = driver.device_name(device).unwrap();
    assert!(!name.is_empty());
    let context = driver.create_context(device).unwrap();
    let before = context.memory_info().unwrap();
    assert!(before.free_bytes <= before.total_bytes);
    let buffer = context.allocate(64 << 20).unwrap();
    let during = context.memory_info().unwrap();
    assert!(during.free_bytes < before.free_bytes, "{before:?} {during:?}");
    buffer.free().unwrap();
    context.synchronize().unwrap();
    let too_large = context.allocate(before.total_bytes * 2).unwrap_err();
    assert!(too_large.is_out_of_memory(), "{too_large}");
    context.destroy().unwrap();
    eprintln!("{name} {uuid}: {before:?}");
}
