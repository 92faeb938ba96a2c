//! MIG devices as monitored devices of their own.
//!
//! A MIG device gets a synthetic index, [`MIG_INDEX_BASE`] + parent × 100 +
//! slot, so the sampler can address it like any device; its `gpu` label is
//! its parent's index and its identity is its `MIG-…` UUID. The parent's
//! slow read lists its MIG UUIDs again ([`uuids`]); when they differ from
//! the listing the source asks the sampler to list devices again.

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use tracing::info;

use crate::model::{DeviceInfo, MigInfo};
use crate::source::SourceError;

use super::driver_error;

/// Indices at or above this are MIG devices.
pub const MIG_INDEX_BASE: u32 = 10_000;
/// Slots per parent in the synthetic index (NVML allows at most 7 today).
const SLOTS_PER_PARENT: u32 = 100;

/// `None` past `u32::MAX`, which only a driver reporting absurd device
/// counts could reach.
fn synthetic_index(parent: u32, slot: u32) -> Option<u32> {
    parent.checked_mul(SLOTS_PER_PARENT)?.checked_add(MIG_INDEX_BASE)?.checked_add(slot)
}

/// The parent index and slot of a synthetic MIG index.
pub fn split(index: u32) -> Option<(u32, u32)> {
    let offset = index.checked_sub(MIG_INDEX_BASE)?;
    Some((offset / SLOTS_PER_PARENT, offset % SLOTS_PER_PARENT))
}

/// The handle for a monitored index, physical or MIG.
pub(super) fn device(nvml: &Nvml, index: u32) -> Result<Device<'_>, SourceError> {
    match split(index) {
        None => nvml
            .device_by_index(index)
            .map_err(|error| driver_error(index, "device_by_index", error)),
        Some((parent, slot)) => nvml
            .device_by_index(parent)
            .and_then(|device| device.mig_device_by_index(slot))
            .map_err(|error| driver_error(index, "mig_device_by_index", error)),
    }
}

/// The MIG devices of a GPU in MIG mode. A slot without a device is
/// skipped; a device that cannot be described is logged and skipped.
pub(super) fn list(parent: &Device<'_>, parent_info: &DeviceInfo) -> Vec<DeviceInfo> {
    let slots = match parent.mig_device_count() {
        Ok(slots) => slots.min(SLOTS_PER_PARENT),
        Err(error) => {
            info!(gpu = parent_info.index, error = %error, "MIG is on but its devices cannot be listed");
            return Vec::new();
        }
    };
    let mut devices = Vec::new();
    for slot in 0..slots {
        let Some(index) = synthetic_index(parent_info.index, slot) else {
            info!(
                gpu = parent_info.index,
                "MIG is on but this GPU's index is too large to address its devices"
            );
            break;
        };
        let described = parent.mig_device_by_index(slot).and_then(|mig| {
            let name = mig.name()?;
            let profile = profile_from_name(&name);
            Ok(DeviceInfo {
                index,
                uuid: mig.uuid()?,
                name,
                pci_bus_id: None,
                driver_version: parent_info.driver_version.clone(),
                mig: Some(MigInfo {
                    parent_index: parent_info.index,
                    parent_uuid: parent_info.uuid.clone(),
                    slot,
                    profile,
                    // Absent rather than a guess when the driver lacks the
                    // calls (older than R470) or refuses them.
                    gpu_instance_id: nvml_mig::gpu_instance_id(&mig).ok(),
                    compute_instance_id: nvml_mig::compute_instance_id(&mig).ok(),
                }),
            })
        });
        match described {
            Ok(info) => devices.push(info),
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => {}
            Err(error) => {
                info!(gpu = parent_info.index, slot, error = %error, "a MIG device cannot be described; skipped");
            }
        }
    }
    devices
}

/// The UUIDs of a MIG-enabled GPU's devices now, in slot order: what is
/// compared with the listing. Unreadable slots are left out, as in [`list`].
pub(super) fn uuids(parent: &Device<'_>) -> Vec<String> {
    let slots = parent.mig_device_count().map_or(0, |slots| slots.min(SLOTS_PER_PARENT));
    (0..slots)
        .filter_map(|slot| parent.mig_device_by_index(slot).and_then(|mig| mig.uuid()).ok())
        .collect()
}

/// `NVIDIA H100 80GB HBM3 MIG 3g.40gb` → `3g.40gb`.
pub fn profile_from_name(name: &str) -> Option<String> {
    let profile = name.rsplit_once(" MIG ")?.1.trim();
    (!profile.is_empty()).then(|| profile.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_indices_round_trip_and_do_not_collide_with_gpus() {
        assert_eq!(split(7), None);
        assert_eq!(split(synthetic_index(0, 0).unwrap()), Some((0, 0)));
        assert_eq!(split(synthetic_index(7, 6).unwrap()), Some((7, 6)));
    }

    #[test]
    fn profile_is_read_from_the_device_name() {
        assert_eq!(
            profile_from_name("NVIDIA H100 80GB HBM3 MIG 3g.40gb").as_deref(),
            Some("3g.40gb")
        );
        assert_eq!(
            profile_from_name("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me").as_deref(),
            Some("1g.5gb+me")
        );
        assert_eq!(profile_from_name("NVIDIA H100 80GB HBM3"), None);
    }
}
