//! Scenario validation: names, ranges and bus ids checked once at init.

use super::{Faults, MAX_DEVICES, MAX_MIG_DEVICES, Scenario};
use crate::symbols;

impl Faults {
    pub(super) fn validate(&self, context: &str) -> Result<(), String> {
        let names = self
            .not_supported
            .iter()
            .chain(self.sleep_ms.keys())
            .chain(self.fail.keys())
            .chain(self.panic_in.iter());
        for name in names {
            if !symbols::ALL.contains(&name.as_str()) {
                return Err(format!("{context}: unknown function name {name:?}"));
            }
        }
        if self.recover_after_calls.is_some() && self.gpu_lost_after_calls.is_none() {
            return Err(format!("{context}: recover_after_calls needs gpu_lost_after_calls"));
        }
        Ok(())
    }
}

/// `(domain, bus, device)` of a `DDDDDDDD:BB:DD.F` bus id.
pub fn parse_bus_id(id: &str) -> Option<(u32, u32, u32)> {
    let (domain, rest) = id.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    if domain.len() > 8 || bus.len() != 2 || device.len() != 2 || function.len() != 1 {
        return None;
    }
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    hex(function)?;
    Some((hex(domain)?, hex(bus)?, hex(device)?))
}

impl Scenario {
    pub fn parse(text: &str) -> Result<Self, String> {
        let scenario: Scenario = serde_json::from_str(text).map_err(|e| e.to_string())?;
        scenario.validate()?;
        Ok(scenario)
    }

    fn validate(&self) -> Result<(), String> {
        if self.devices.len() > MAX_DEVICES {
            return Err(format!("at most {MAX_DEVICES} devices"));
        }
        self.system_faults.validate("system_faults")?;
        if self.system_faults.gpu_lost_after_calls.is_some() {
            return Err("system_faults: gpu_lost_after_calls is per device".into());
        }
        for (index, device) in self.devices.iter().enumerate() {
            let context = format!("devices[{index}]");
            device.faults.validate(&format!("{context}.faults"))?;
            let bus_id = device.pci_bus_id(index);
            if parse_bus_id(&bus_id).is_none() {
                return Err(format!("{context}.pci_bus_id: {bus_id:?} is not DDDDDDDD:BB:DD.F"));
            }
            let memories = device.memory.iter().chain(
                device.mig.iter().flat_map(|m| m.devices.iter().filter_map(|d| d.memory.as_ref())),
            );
            for memory in memories {
                if memory.reserved_bytes > memory.total_bytes {
                    return Err(format!("{context}: reserved_bytes > total_bytes"));
                }
            }
            let mig_count = device.mig.as_ref().map_or(0, |m| m.devices.len());
            let mig_max = device.mig.as_ref().map_or(0, |m| m.max_devices as usize);
            if mig_count > MAX_MIG_DEVICES.min(mig_max) {
                return Err(format!(
                    "{context}.mig: more devices than max_devices (at most {MAX_MIG_DEVICES})"
                ));
            }
        }
        Ok(())
    }
}
