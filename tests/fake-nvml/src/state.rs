//! The library's global state between `nvmlInit` and the last `nvmlShutdown`,
//! opaque handles, and the fault plan every call goes through.
//!
//! The state lock is never held while a call sleeps or panics, so an injected
//! hang on one device does not stall calls on another.

use std::collections::{BTreeSet, HashMap};
use std::os::raw::c_uint;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_st, nvmlDevice_t, nvmlEventSet_st, nvmlEventSet_t, nvmlReturn_t,
};

use crate::codes::*;
use crate::scenario::{DeviceSpec, Faults, MigDeviceSpec, Scenario};

/// What is loaded while NVML is initialised.
pub struct Loaded {
    pub scenario: Arc<Scenario>,
    pub started: Instant,
    refcount: u32,
    /// Calls so far per physical device (its MIG devices included).
    calls: Vec<u64>,
    /// Calls so far per (target, function): indexes `used_bytes_per_call`.
    sequence: HashMap<(Target, &'static str), u64>,
    pub event_sets: HashMap<usize, EventSetState>,
    next_set: usize,
}

#[derive(Debug, Default)]
pub struct EventSetState {
    /// Registered event-type masks per physical device index.
    pub registered: HashMap<usize, u64>,
    /// (device, xid event index) already delivered through this set.
    pub delivered: BTreeSet<(usize, usize)>,
}

static STATE: Mutex<Option<Loaded>> = Mutex::new(None);

/// The state lock; a panic elsewhere never makes it unusable.
pub fn lock() -> MutexGuard<'static, Option<Loaded>> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts one more `nvmlInit` if already initialised.
pub fn retain() -> bool {
    match lock().as_mut() {
        Some(loaded) => {
            loaded.refcount += 1;
            true
        }
        None => false,
    }
}

/// Installs a freshly read scenario (or counts a reference if another
/// thread won the race).
pub fn install(scenario: Scenario) {
    let mut guard = lock();
    if let Some(loaded) = guard.as_mut() {
        loaded.refcount += 1;
        return;
    }
    let devices = scenario.devices.len();
    *guard = Some(Loaded {
        scenario: Arc::new(scenario),
        started: Instant::now(),
        refcount: 1,
        calls: vec![0; devices],
        sequence: HashMap::new(),
        event_sets: HashMap::new(),
        next_set: 1,
    });
}

/// Drops one reference; the last one unloads the scenario.
pub fn release() -> nvmlReturn_t {
    let mut guard = lock();
    let Some(loaded) = guard.as_mut() else { return UNINITIALIZED };
    loaded.refcount -= 1;
    if loaded.refcount == 0 {
        *guard = None;
    }
    SUCCESS
}

/// A device handle's meaning: a physical GPU or one of its MIG devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    Gpu(usize),
    Mig(usize, usize),
}

const DEVICE_TAG: usize = 0x6E76_0000;
const SET_TAG: usize = 0x6576_0000_0000;

impl Target {
    pub fn gpu(self) -> usize {
        match self {
            Target::Gpu(gpu) | Target::Mig(gpu, _) => gpu,
        }
    }

    /// The opaque handle for this target (never dereferenced by anyone).
    pub fn handle(self) -> nvmlDevice_t {
        let (gpu, mig) = match self {
            Target::Gpu(gpu) => (gpu, 0),
            Target::Mig(gpu, mig) => (gpu, mig + 1),
        };
        std::ptr::without_provenance_mut::<nvmlDevice_st>(DEVICE_TAG | (gpu + 1) << 8 | mig)
    }

    /// The target a handle stands for, if it is one this scenario handed out.
    pub fn decode(handle: nvmlDevice_t, scenario: &Scenario) -> Option<Target> {
        let addr = handle.addr();
        if addr & !0xFFFF != DEVICE_TAG {
            return None;
        }
        let gpu = ((addr >> 8) & 0xFF).checked_sub(1)?;
        let device = scenario.devices.get(gpu)?;
        match (addr & 0xFF).checked_sub(1) {
            None => Some(Target::Gpu(gpu)),
            Some(mig) => {
                let spec = device.mig.as_ref()?;
                (spec.enabled && mig < spec.current().len()).then_some(Target::Mig(gpu, mig))
            }
        }
    }
}

pub fn set_handle(id: usize) -> nvmlEventSet_t {
    std::ptr::without_provenance_mut::<nvmlEventSet_st>(SET_TAG | id)
}

pub fn set_id(handle: nvmlEventSet_t) -> Option<usize> {
    let addr = handle.addr();
    (addr & !0xFFFF_FFFF == SET_TAG).then_some(addr & 0xFFFF_FFFF)
}

impl Loaded {
    pub fn new_event_set(&mut self) -> usize {
        let id = self.next_set;
        self.next_set += 1;
        self.event_sets.insert(id, EventSetState::default());
        id
    }
}

/// What a call sees once its faults have been applied.
pub struct Call {
    pub scenario: Arc<Scenario>,
    pub target: Target,
    pub started: Instant,
    /// 0 for the first call of this function on this target.
    pub sequence: u64,
}

impl Call {
    pub fn device(&self) -> &DeviceSpec {
        &self.scenario.devices[self.target.gpu()]
    }

    /// The physical GPU; MIG handles get NOT_SUPPORTED.
    pub fn physical(&self) -> Result<&DeviceSpec, nvmlReturn_t> {
        match self.target {
            Target::Gpu(_) => Ok(self.device()),
            Target::Mig(..) => Err(NOT_SUPPORTED),
        }
    }

    pub fn mig(&self) -> Option<&MigDeviceSpec> {
        match self.target {
            Target::Gpu(_) => None,
            Target::Mig(gpu, mig) => self.scenario.devices[gpu].mig.as_ref()?.current().get(mig),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// The device a call addresses: by handle, or by index for the handle getters.
#[derive(Clone, Copy)]
pub enum Subject {
    Handle(nvmlDevice_t),
    Index(c_uint),
    Target(Target),
}

/// What the faults decided for one call, applied outside the lock.
struct Plan {
    sleep: Option<Duration>,
    panic: bool,
    error: Option<nvmlReturn_t>,
}

fn plan(faults: &Faults, name: &str, lost: bool) -> Plan {
    let error = if lost {
        Some(GPU_IS_LOST)
    } else if let Some(code) = faults.fail.get(name) {
        Some(code.0)
    } else if faults.not_supported.iter().any(|n| n == name) {
        Some(NOT_SUPPORTED)
    } else {
        None
    };
    Plan {
        sleep: faults.sleep_ms.get(name).map(|ms| Duration::from_millis(*ms)),
        panic: faults.panic_in.iter().any(|n| n == name),
        error,
    }
}

fn apply(plan: &Plan, name: &str) -> Result<(), nvmlReturn_t> {
    if let Some(duration) = plan.sleep {
        std::thread::sleep(duration);
    }
    if plan.panic {
        std::panic::panic_any(format!("fake-nvml: injected panic in {name}"));
    }
    plan.error.map_or(Ok(()), Err)
}

/// Runs a call on a device: checks initialisation and the handle, counts
/// the call, applies the device's faults, then runs `body`.
pub fn device_call(
    name: &'static str,
    subject: Subject,
    body: impl FnOnce(&Call) -> Result<(), nvmlReturn_t>,
) -> nvmlReturn_t {
    crate::ffi_util::boundary(|| {
        let (call, plan) = {
            let mut guard = lock();
            let Some(loaded) = guard.as_mut() else { return Err(UNINITIALIZED) };
            let target = match subject {
                Subject::Handle(handle) => Target::decode(handle, &loaded.scenario),
                Subject::Index(index) => {
                    let index = index as usize;
                    (index < loaded.scenario.devices.len()).then_some(Target::Gpu(index))
                }
                Subject::Target(target) => Some(target),
            };
            let Some(target) = target else { return Err(INVALID_ARGUMENT) };
            let gpu = target.gpu();
            loaded.calls[gpu] += 1;
            let count = loaded.calls[gpu];
            let faults = &loaded.scenario.devices[gpu].faults;
            let lost = faults.gpu_lost_after_calls.is_some_and(|after| {
                count > after && faults.recover_after_calls.is_none_or(|m| count <= after + m)
            });
            let plan = plan(faults, name, lost);
            let sequence = loaded.sequence.entry((target, name)).or_insert(0);
            let call = Call {
                scenario: loaded.scenario.clone(),
                target,
                started: loaded.started,
                sequence: *sequence,
            };
            *sequence += 1;
            (call, plan)
        };
        apply(&plan, name)?;
        body(&call)
    })
}

/// Runs a call that takes no device, applying `system_faults`.
pub fn system_call(
    name: &'static str,
    body: impl FnOnce(&Arc<Scenario>) -> Result<(), nvmlReturn_t>,
) -> nvmlReturn_t {
    crate::ffi_util::boundary(|| {
        let (scenario, plan) = {
            let guard = lock();
            let Some(loaded) = guard.as_ref() else { return Err(UNINITIALIZED) };
            (loaded.scenario.clone(), plan(&loaded.scenario.system_faults, name, false))
        };
        apply(&plan, name)?;
        body(&scenario)
    })
}
