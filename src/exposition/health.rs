//! Device health series from the slow tier: clocks, throttling, ECC,
//! retired pages, remapped rows, modes, BAR1, PCIe, energy, performance
//! state, encoder/decoder utilization and Xid errors.

use crate::history::LiveState;
use crate::model::{ComputeMode, SlowDetails, THROTTLE_REASONS};

use super::text::{Family, FamilyWriter, family};
use super::{DeviceView, device_family};

#[rustfmt::skip]
mod families {
    use super::*;
    family!(pub(super) BAR1_TOTAL, "vramd_bar1_total_bytes", Gauge, "Size of the BAR1 aperture (CPU-mapped device memory).");
    family!(pub(super) BAR1_USED, "vramd_bar1_used_bytes", Gauge, "BAR1 aperture in use.");
    family!(pub(super) SM_CLOCK, "vramd_sm_clock_hertz", Gauge, "Current streaming-multiprocessor clock.");
    family!(pub(super) MEMORY_CLOCK, "vramd_memory_clock_hertz", Gauge, "Current memory clock.");
    family!(pub(super) THROTTLE, "vramd_clock_throttle_active", Gauge, "1 while the named clock throttle reason is active, else 0.");
    family!(pub(super) ECC_ERRORS, "vramd_ecc_errors_total", Counter, "ECC errors by type (corrected, uncorrected) and scope (volatile: since the driver loaded; aggregate: lifetime). Present only while ECC is enabled.");
    family!(pub(super) RETIRED_PAGES, "vramd_retired_pages", Gauge, "Device memory pages retired for ECC errors, by cause.");
    family!(pub(super) RETIRED_PENDING, "vramd_retired_pages_pending", Gauge, "1 when a page retirement waits for the next driver reload.");
    family!(pub(super) REMAPPED_ROWS, "vramd_remapped_rows", Gauge, "Memory rows remapped for errors, by type.");
    family!(pub(super) REMAP_PENDING, "vramd_remapped_rows_pending", Gauge, "1 when a row remapping waits for the next GPU reset.");
    family!(pub(super) REMAP_FAILURE, "vramd_remapped_rows_failure", Gauge, "1 when a row remapping failed: the GPU needs service.");
    family!(pub(super) PERSISTENCE, "vramd_persistence_mode", Gauge, "1 when persistence mode is on.");
    family!(pub(super) COMPUTE_MODE, "vramd_compute_mode", Gauge, "The device's compute mode; the series with value 1 names it.");
    family!(pub(super) MIG_MODE, "vramd_mig_mode", Gauge, "1 when MIG mode is enabled.");
    family!(pub(super) PCIE_TX, "vramd_pcie_tx_bytes_per_second", Gauge, "PCIe transmit throughput (only with nvml.pcie_throughput).");
    family!(pub(super) PCIE_RX, "vramd_pcie_rx_bytes_per_second", Gauge, "PCIe receive throughput (only with nvml.pcie_throughput).");
    family!(pub(super) XID_ERRORS, "vramd_xid_errors_total", Counter, "Xid errors reported by the driver since vramd started, by code.");
    family!(pub(super) LAST_XID, "vramd_device_last_xid_timestamp_seconds", Gauge, "Time the device's latest Xid error arrived; absent until one does (changes() catches the first one, which increase() on vramd_xid_errors_total cannot).");
    family!(pub(super) ENERGY, "vramd_energy_consumption_joules_total", Counter, "Energy the GPU used since the driver was loaded (NVML total energy consumption).");
    family!(pub(super) PSTATE, "vramd_performance_state", Gauge, "Current performance state: 0 for P0 (most performance) to 15 for P15; absent when unknown.");
    family!(pub(super) ENCODER_UTIL, "vramd_encoder_utilization_ratio", Gauge, "Fraction of the driver's sampling period during which the video encoder was busy.");
    family!(pub(super) DECODER_UTIL, "vramd_decoder_utilization_ratio", Gauge, "Fraction of the driver's sampling period during which the video decoder was busy.");
}

use families::*;

fn details(live: &LiveState) -> Option<&SlowDetails> {
    live.slow.as_deref().map(|slow| &slow.details)
}

pub(super) fn render(views: &[DeviceView<'_>], out: &mut Vec<u8>) {
    let flag = |value: bool| if value { 1.0 } else { 0.0 };
    device_family(out, views, &BAR1_TOTAL, |live| Some(details(live)?.bar1?.total_bytes as f64));
    device_family(out, views, &BAR1_USED, |live| Some(details(live)?.bar1?.used_bytes as f64));
    device_family(out, views, &SM_CLOCK, |live| {
        Some(f64::from(details(live)?.sm_clock_mhz?) * 1e6)
    });
    device_family(out, views, &MEMORY_CLOCK, |live| {
        Some(f64::from(details(live)?.memory_clock_mhz?) * 1e6)
    });
    labelled(out, views, &THROTTLE, |live, emit| {
        if let Some(bits) = details(live).and_then(|d| d.throttle_reasons) {
            for &(bit, name) in THROTTLE_REASONS {
                emit(&[("reason", name)], flag(bits & bit != 0));
            }
        }
    });
    labelled(out, views, &ECC_ERRORS, |live, emit| {
        let Some(ecc) = details(live).and_then(|d| d.ecc) else { return };
        for (kind, scope, count) in [
            ("corrected", "volatile", ecc.volatile_corrected),
            ("uncorrected", "volatile", ecc.volatile_uncorrected),
            ("corrected", "aggregate", ecc.aggregate_corrected),
            ("uncorrected", "aggregate", ecc.aggregate_uncorrected),
        ] {
            emit(&[("type", kind), ("scope", scope)], count as f64);
        }
    });
    labelled(out, views, &RETIRED_PAGES, |live, emit| {
        if let Some(pages) = details(live).and_then(|d| d.retired_pages) {
            emit(&[("cause", "single_bit_ecc")], pages.single_bit_ecc as f64);
            emit(&[("cause", "double_bit_ecc")], pages.double_bit_ecc as f64);
        }
    });
    device_family(out, views, &RETIRED_PENDING, |live| {
        Some(flag(details(live)?.retired_pages?.pending?))
    });
    labelled(out, views, &REMAPPED_ROWS, |live, emit| {
        if let Some(rows) = details(live).and_then(|d| d.remapped_rows) {
            emit(&[("type", "correctable")], rows.correctable as f64);
            emit(&[("type", "uncorrectable")], rows.uncorrectable as f64);
        }
    });
    device_family(out, views, &REMAP_PENDING, |live| {
        Some(flag(details(live)?.remapped_rows?.pending))
    });
    device_family(out, views, &REMAP_FAILURE, |live| {
        Some(flag(details(live)?.remapped_rows?.failure))
    });
    device_family(out, views, &PERSISTENCE, |live| Some(flag(details(live)?.persistence_mode?)));
    labelled(out, views, &COMPUTE_MODE, |live, emit| {
        if let Some(mode) = details(live).and_then(|d| d.compute_mode) {
            for &other in <ComputeMode as strum::VariantArray>::VARIANTS {
                emit(&[("mode", other.as_str())], flag(mode == other));
            }
        }
    });
    device_family(out, views, &MIG_MODE, |live| Some(flag(details(live)?.mig_enabled?)));
    device_family(out, views, &PCIE_TX, |live| {
        Some(details(live)?.pcie_tx_bytes_per_second? as f64)
    });
    device_family(out, views, &PCIE_RX, |live| {
        Some(details(live)?.pcie_rx_bytes_per_second? as f64)
    });
    labelled(out, views, &XID_ERRORS, |live, emit| {
        for (code, count) in details(live).map(|d| &d.xid_errors).into_iter().flatten() {
            emit(&[("xid", code)], *count as f64);
        }
    });
    device_family(out, views, &LAST_XID, |live| {
        Some(details(live)?.last_xid_unix_ms?.unix_seconds_f64())
    });
    device_family(out, views, &ENERGY, |live| {
        Some(details(live)?.energy_millijoules? as f64 / 1000.0)
    });
    device_family(out, views, &PSTATE, |live| Some(f64::from(details(live)?.performance_state?)));
    device_family(out, views, &ENCODER_UTIL, |live| {
        Some(f64::from(details(live)?.encoder_utilization_percent?) / 100.0)
    });
    device_family(out, views, &DECODER_UTIL, |live| {
        Some(f64::from(details(live)?.decoder_utilization_percent?) / 100.0)
    });
}

/// A family whose series per device carry extra labels.
fn labelled(
    out: &mut Vec<u8>,
    views: &[DeviceView<'_>],
    family: &Family,
    series: impl Fn(&LiveState, &mut dyn FnMut(&[(&str, &str)], f64)),
) {
    let mut writer = FamilyWriter::new(out, family);
    for view in views {
        series(&view.live, &mut |extra, value| {
            let mut labels = view.labels.clone();
            for (name, label_value) in extra {
                labels.push(name, label_value);
            }
            writer.float(labels.as_str(), value);
        });
    }
}
