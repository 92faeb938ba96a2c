//! The GPU models the simulator can play, and the static facts of each
//! simulated device (name, UUID, PCI bus id, driver version).
//!
//! Owns: model specifications and which model each scenario uses.
//! Depends on: `model` (for [`DeviceInfo`]), and the simulator's `noise` and
//! `scenario`. Knows nothing of time or workloads. Public, as far as the
//! detection corpus (`crates/corpus`) needs it: the size units, the H100
//! and a device's static facts.

use super::noise::{self, Stream};
use crate::model::DeviceInfo;
use crate::model::ScenarioKind;

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// The driver every simulated host runs (a 570 production branch release).
pub(super) const DRIVER_VERSION: &str = "570.124.06";

/// One real GPU model, with the numbers NVML reports for it.
#[derive(Debug, PartialEq)]
pub struct GpuModel {
    pub name: &'static str,
    /// NVML `total`, exact bytes.
    pub total_bytes: u64,
    /// NVML v2 `reserved`: the driver's own share, never usable by processes.
    pub driver_reserved_bytes: u64,
    pub power_limit_watts: f64,
    pub idle_power_watts: f64,
    /// PCI bus numbers of an 8-GPU baseboard of this model, in index order.
    pub pci_buses: [u8; 8],
}

impl GpuModel {
    /// What processes can use between them: `total − driver reserved`.
    pub fn capacity_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.driver_reserved_bytes)
    }
}

pub const H100_80GB: GpuModel = GpuModel {
    name: "NVIDIA H100 80GB HBM3",
    total_bytes: 81_559 * MIB,
    driver_reserved_bytes: 543 * MIB,
    power_limit_watts: 700.0,
    idle_power_watts: 72.0,
    // An HGX H100 baseboard.
    pci_buses: [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB],
};

pub(super) const H200: GpuModel = GpuModel {
    name: "NVIDIA H200",
    total_bytes: 143_771 * MIB,
    driver_reserved_bytes: 575 * MIB,
    power_limit_watts: 700.0,
    idle_power_watts: 76.0,
    pci_buses: [0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB],
};

pub(super) const A100_40GB: GpuModel = GpuModel {
    name: "NVIDIA A100-SXM4-40GB",
    total_bytes: 40_960 * MIB,
    driver_reserved_bytes: 336 * MIB,
    power_limit_watts: 400.0,
    idle_power_watts: 55.0,
    // A DGX A100.
    pci_buses: [0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD],
};

/// The model every GPU of a scenario's host is: hosts are homogeneous.
///
/// Inference serving runs on H200 (the large memory is the point), the
/// shared multi-tenant box is an older A100 40GB, everything else is H100.
pub(super) fn model_for(scenario: ScenarioKind) -> &'static GpuModel {
    match scenario {
        ScenarioKind::SteadyInference => &H200,
        ScenarioKind::MultiTenant => &A100_40GB,
        ScenarioKind::TrainingFragmentation
        | ScenarioKind::Leak
        | ScenarioKind::OomSpike
        | ScenarioKind::DeviceLost
        | ScenarioKind::Idle => &H100_80GB,
    }
}

/// The static facts of device `index`, derived only from the seed and index.
pub fn device_info(model: &GpuModel, seed: u64, index: u32) -> DeviceInfo {
    DeviceInfo {
        index,
        uuid: uuid(seed, index),
        name: model.name.to_owned(),
        pci_bus_id: Some(pci_bus_id(model, index)),
        driver_version: Some(DRIVER_VERSION.to_owned()),
        mig: None,
    }
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML formats UUIDs.
fn uuid(seed: u64, index: u32) -> String {
    let high = noise::hash(seed, Stream::Uuid, &[u64::from(index), 0]);
    let low = noise::hash(seed, Stream::Uuid, &[u64::from(index), 1]);
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xFFFF,
        high & 0xFFFF,
        low >> 48,
        low & 0xFFFF_FFFF_FFFF
    )
}

/// `00000000:18:00.0`, as NVML formats bus ids (domain:bus:device.function).
fn pci_bus_id(model: &GpuModel, index: u32) -> String {
    let slot = usize::try_from(index).unwrap_or(usize::MAX);
    // Indices beyond a baseboard do not occur (specs are capped at 8), but a
    // made-up bus keeps this total rather than a panic path.
    let bus = model.pci_buses.get(slot).copied().unwrap_or(0xFF);
    format!("00000000:{bus:02X}:00.0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_match_what_nvml_reports_for_real_boards() {
        assert_eq!(H100_80GB.total_bytes, 85_520_809_984);
        assert_eq!(H200.total_bytes, 150_754_820_096);
        assert_eq!(A100_40GB.total_bytes, 42_949_672_960);
        for model in [&H100_80GB, &H200, &A100_40GB] {
            let reserved_mib = model.driver_reserved_bytes / MIB;
            assert!((300..=600).contains(&reserved_mib), "{}", model.name);
        }
    }

    #[test]
    fn device_facts_have_nvml_formats_and_differ_per_index_and_seed() {
        let info = device_info(&H100_80GB, 42, 0);
        let uuid = info.uuid.as_str();
        let groups: Vec<usize> = uuid.trim_start_matches("GPU-").split('-').map(str::len).collect();
        assert!(uuid.starts_with("GPU-"), "{uuid}");
        assert_eq!(groups, [8, 4, 4, 4, 12], "{uuid}");
        assert!(uuid[4..].chars().all(|c| c == '-' || c.is_ascii_hexdigit()), "{uuid}");
        assert_eq!(info.pci_bus_id.as_deref(), Some("00000000:18:00.0"));
        assert_eq!(info.driver_version.as_deref(), Some(DRIVER_VERSION));
        assert_ne!(info.uuid, device_info(&H100_80GB, 42, 1).uuid);
        assert_ne!(info.uuid, device_info(&H100_80GB, 43, 0).uuid);
        assert_eq!(info, device_info(&H100_80GB, 42, 0));
    }

    #[test]
    fn out_of_range_index_gets_a_bus_id_instead_of_a_panic() {
        assert_eq!(device_info(&A100_40GB, 1, 9).pci_bus_id.as_deref(), Some("00000000:FF:00.0"));
    }
}
