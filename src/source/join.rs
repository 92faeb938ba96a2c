//! Joining what the device source cannot see onto its slow readings.
//!
//! Owns: [`Joiner`], a [`DeviceSource`] that passes every call through to
//! the source it wraps and hands each slow reading, with the device it
//! belongs to, to one [`SlowJoin`] before returning it. The wiring (`app`)
//! builds that join from the allocator reports and the Kubernetes
//! attribution, in one order, wraps the raw source in the joiner, and (when
//! recording) the recorder around the joiner: the sampler and the trace
//! read the same joined reading, and a replay sees what the analysis saw.
//!
//! Depends only on `model` and `source`; the join is a function, so this
//! module knows nothing of ingestion, Kubernetes, history or the sampler.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::model::{DeviceInfo, FastReading, SlowReading};
use crate::source::{DeviceSource, SourceError};

/// Adds facts from outside the source to one device's slow reading. It
/// runs on the sampling path, on every slow reading of every device (on
/// that device's slow-tier thread, inside the call's deadline), so it reads
/// published state; the only wait it may make is a bounded one its owner
/// documents as a key (the Kubernetes join waits up to
/// `kubernetes.lookup_wait`, once per new container).
pub type SlowJoin = Box<dyn Fn(&DeviceInfo, &mut SlowReading) + Send + Sync>;

/// Wraps a source and joins [`SlowJoin`] onto every slow reading it returns.
pub struct Joiner<S> {
    inner: S,
    join: SlowJoin,
    /// The devices of the latest successful `devices()`: what the join is
    /// told about the device a reading belongs to.
    devices: RwLock<Vec<Arc<DeviceInfo>>>,
}

impl<S: DeviceSource> Joiner<S> {
    pub fn new(inner: S, join: SlowJoin) -> Self {
        Self { inner, join, devices: RwLock::new(Vec::new()) }
    }
}

impl<S: DeviceSource> DeviceSource for Joiner<S> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn layout_generation(&self) -> u64 {
        self.inner.layout_generation()
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        let devices = self.inner.devices()?;
        *self.devices.write() = devices.iter().cloned().map(Arc::new).collect();
        Ok(devices)
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        self.inner.read_fast(index)
    }

    /// A reading of a device not (yet) listed is returned as read: the
    /// sampler reads only devices it listed through this source. The join
    /// sees only the processes the cap kept.
    fn read_slow(&self, index: u32, max_processes: usize) -> Result<SlowReading, SourceError> {
        let mut reading = self.inner.read_slow(index, max_processes)?;
        // The listing's lock is not held during the join, so a relisting
        // (a MIG reconfiguration) never waits on it.
        let info = self.devices.read().iter().find(|device| device.index == index).cloned();
        if let Some(info) = info {
            (self.join)(&info, &mut reading);
        }
        Ok(reading)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ScaledClock;
    use crate::model::{ScenarioKind, Timestamp};
    use crate::source::simulator::{Simulator, SimulatorSpec};

    #[test]
    fn every_slow_reading_of_a_listed_device_is_joined_with_its_device() {
        let origin = Timestamp::from_unix_millis(1_767_225_600_000);
        let spec = SimulatorSpec { scenario: ScenarioKind::MultiTenant, gpus: 2, seed: 4 };
        let simulator =
            Simulator::with_origin(spec, ScaledClock::starting_at(origin, 1.0), origin).unwrap();
        let joiner = Joiner::new(
            simulator,
            Box::new(|info, reading| {
                for process in reading.processes.iter_mut().flatten() {
                    process.name = Some(info.uuid.as_str().into());
                }
            }),
        );
        let names = |reading: SlowReading| -> Vec<Option<String>> {
            let processes = reading.processes.unwrap();
            assert!(!processes.is_empty());
            processes.iter().map(|process| process.name.as_deref().map(str::to_owned)).collect()
        };
        let uuid = Some(joiner.inner.devices().unwrap()[1].uuid.clone());
        // Not listed through the joiner yet: returned as read.
        assert!(names(joiner.read_slow(1, 64).unwrap()).iter().all(|name| *name != uuid));
        assert_eq!(joiner.devices().unwrap().len(), 2);
        assert!(names(joiner.read_slow(1, 64).unwrap()).iter().all(|name| *name == uuid));
        assert!(joiner.read_fast(1).is_ok());
        assert_eq!(joiner.name(), "simulator");
    }
}
