//! The library's process-global state between a successful `cuInit` and the
//! end of the process: the scenario, each device's free memory, the live
//! contexts, the stack of current ones (its top is current) and the live
//! allocations.
//!
//! One stack for the whole process, not one per thread: enough for the probe
//! and the driver-trace programs, which switch contexts on one thread. The lock is never held while a call
//! sleeps or hangs.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::codes::*;
use crate::scenario::{DeviceSpec, Scenario};

/// An opaque `CUcontext` value: this tag plus the context's id. Never
/// dereferenced, by anyone.
const CONTEXT_TAG: usize = 0xC0_0000_0000;
/// The context of a physical allocation, which belongs to none (context
/// ids start at 1).
const NO_CONTEXT: usize = 0;
/// Device pointers start here (as on a real GPU, never 0).
const POINTER_BASE: u64 = 0x7f00_0000_0000;
/// Device pointers advance by at least this (the driver's alignment).
const ALIGNMENT: u64 = 512;

pub struct Loaded {
    pub scenario: Scenario,
    /// Current free bytes per device.
    free: Vec<u64>,
    /// Live contexts, oldest first.
    contexts: Vec<ContextEntry>,
    /// Ids of the current context stack; the last one is current.
    stack: Vec<usize>,
    /// Each device's primary context, once retained: (id, references).
    primary: HashMap<usize, (usize, u32)>,
    allocations: HashMap<u64, Allocation>,
    next_context: usize,
    next_pointer: u64,
}

#[derive(Clone, Copy)]
struct ContextEntry {
    id: usize,
    device: usize,
}

struct Allocation {
    context: usize,
    device: usize,
    bytes: u64,
}

static STATE: Mutex<Option<Loaded>> = Mutex::new(None);

/// The state lock; a panic elsewhere never makes it unusable.
fn lock() -> MutexGuard<'static, Option<Loaded>> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a `cuInit` has succeeded.
pub fn initialised() -> bool {
    lock().is_some()
}

/// Installs the scenario unless another thread's `cuInit` did first.
pub fn install(scenario: Scenario) {
    let mut guard = lock();
    if guard.is_none() {
        let free = scenario.devices.iter().map(|device| device.free_bytes).collect();
        *guard = Some(Loaded {
            scenario,
            free,
            contexts: Vec::new(),
            stack: Vec::new(),
            primary: HashMap::new(),
            allocations: HashMap::new(),
            next_context: 1,
            next_pointer: POINTER_BASE,
        });
    }
}

/// Runs `body` on the state: NOT_INITIALIZED before a successful `cuInit`.
pub fn with<R>(body: impl FnOnce(&mut Loaded) -> Result<R, CUresult>) -> Result<R, CUresult> {
    let mut guard = lock();
    let loaded = guard.as_mut().ok_or(NOT_INITIALIZED)?;
    body(loaded)
}

pub fn context_handle(id: usize) -> *mut std::ffi::c_void {
    std::ptr::without_provenance_mut(CONTEXT_TAG | id)
}

impl Loaded {
    /// The device with this ordinal; INVALID_DEVICE when there is none.
    pub fn device(&self, ordinal: std::os::raw::c_int) -> Result<(usize, &DeviceSpec), CUresult> {
        let index = usize::try_from(ordinal).map_err(|_| INVALID_DEVICE)?;
        self.scenario.devices.get(index).map(|spec| (index, spec)).ok_or(INVALID_DEVICE)
    }

    /// The current context's device; INVALID_CONTEXT when there is none.
    pub fn current_device(&self) -> Result<(usize, &DeviceSpec), CUresult> {
        let current = self.current()?;
        Ok((current.device, &self.scenario.devices[current.device]))
    }

    fn current(&self) -> Result<ContextEntry, CUresult> {
        let id = self.stack.last().ok_or(INVALID_CONTEXT)?;
        self.contexts.iter().find(|entry| entry.id == *id).copied().ok_or(INVALID_CONTEXT)
    }

    /// The id of a live context's handle; INVALID_CONTEXT for another.
    fn id_of(&self, handle: usize) -> Result<usize, CUresult> {
        let entry = self.contexts.iter().find(|entry| (CONTEXT_TAG | entry.id) == handle);
        entry.map(|entry| entry.id).ok_or(INVALID_CONTEXT)
    }

    /// Makes the context with this handle current, in place of the current
    /// one (`cuCtxSetCurrent`); a null handle unbinds the current one.
    pub fn set_current(&mut self, handle: usize) -> Result<(), CUresult> {
        if handle == 0 {
            self.stack.pop();
            return Ok(());
        }
        let id = self.id_of(handle)?;
        self.stack.pop();
        self.stack.push(id);
        Ok(())
    }

    /// Pushes the context with this handle (`cuCtxPushCurrent_v2`).
    pub fn push_current(&mut self, handle: usize) -> Result<(), CUresult> {
        let id = self.id_of(handle)?;
        self.stack.push(id);
        Ok(())
    }

    /// Pops the current context and returns its handle (`cuCtxPopCurrent_v2`).
    pub fn pop_current(&mut self) -> Result<usize, CUresult> {
        let id = self.stack.pop().ok_or(INVALID_CONTEXT)?;
        Ok(CONTEXT_TAG | id)
    }

    /// The device's primary context, created (not made current) at its
    /// first retain (`cuDevicePrimaryCtxRetain`).
    pub fn retain_primary(&mut self, device: usize) -> Result<usize, CUresult> {
        if let Some((id, references)) = self.primary.get_mut(&device) {
            *references += 1;
            return Ok(*id);
        }
        let id = self.create_context(device)?;
        self.stack.pop();
        self.primary.insert(device, (id, 1));
        Ok(id)
    }

    /// (free, total) of the current context's device.
    pub fn memory_info(&self) -> Result<(u64, u64), CUresult> {
        let (index, spec) = self.current_device()?;
        Ok((self.free[index], spec.total_bytes))
    }

    /// A new context on `device`, made current; it takes `context_bytes`.
    pub fn create_context(&mut self, device: usize) -> Result<usize, CUresult> {
        let spec = &self.scenario.devices[device];
        if let Some(code) = spec.context_error {
            return Err(code);
        }
        let cost = spec.context_bytes;
        self.free[device] = self.free[device].checked_sub(cost).ok_or(OUT_OF_MEMORY)?;
        let id = self.next_context;
        self.next_context += 1;
        self.contexts.push(ContextEntry { id, device });
        self.stack.push(id);
        Ok(id)
    }

    /// Destroys a context (current or not) and everything allocated in it,
    /// giving their memory back; INVALID_CONTEXT for an unknown handle.
    pub fn destroy_context(&mut self, handle: usize) -> Result<(), CUresult> {
        let position = self
            .contexts
            .iter()
            .position(|entry| (CONTEXT_TAG | entry.id) == handle)
            .ok_or(INVALID_CONTEXT)?;
        let entry = self.contexts.remove(position);
        self.stack.retain(|id| *id != entry.id);
        let spec = &self.scenario.devices[entry.device];
        let mut returned = spec.context_bytes;
        self.allocations.retain(|_, allocation| {
            let keep = allocation.context != entry.id;
            if !keep {
                returned += allocation.bytes;
            }
            keep
        });
        self.free[entry.device] += returned;
        Ok(())
    }

    /// Allocates in the current context: INVALID_VALUE for 0 bytes,
    /// OUT_OF_MEMORY above `max_alloc_bytes` or the free memory.
    pub fn allocate(&mut self, bytes: u64) -> Result<u64, CUresult> {
        let current = self.current()?;
        self.allocate_on(current, bytes)
    }

    /// A physical allocation (`cuMemCreate`) on the device with this
    /// ordinal, in no context (it outlives any): the same checks as
    /// [`Self::allocate`]; the handle comes from the pointers' range.
    pub fn create_physical(&mut self, ordinal: i32, bytes: u64) -> Result<u64, CUresult> {
        let (device, _) = self.device(ordinal)?;
        self.allocate_on(ContextEntry { id: NO_CONTEXT, device }, bytes)
    }

    fn allocate_on(&mut self, current: ContextEntry, bytes: u64) -> Result<u64, CUresult> {
        let spec = &self.scenario.devices[current.device];
        if let Some(code) = spec.alloc_error {
            return Err(code);
        }
        if bytes == 0 {
            return Err(INVALID_VALUE);
        }
        if spec.max_alloc_bytes.is_some_and(|max| bytes > max) {
            return Err(OUT_OF_MEMORY);
        }
        let pointer = self.next_pointer;
        let next = bytes
            .checked_next_multiple_of(ALIGNMENT)
            .and_then(|step| pointer.checked_add(step))
            .ok_or(OUT_OF_MEMORY)?;
        let free = &mut self.free[current.device];
        *free = free.checked_sub(bytes).ok_or(OUT_OF_MEMORY)?;
        self.next_pointer = next;
        let allocation = Allocation { context: current.id, device: current.device, bytes };
        self.allocations.insert(pointer, allocation);
        Ok(pointer)
    }

    /// Frees an allocation; INVALID_VALUE for a pointer not allocated here.
    pub fn free(&mut self, pointer: u64) -> Result<(), CUresult> {
        let allocation = self.allocations.remove(&pointer).ok_or(INVALID_VALUE)?;
        self.free[allocation.device] += allocation.bytes;
        Ok(())
    }
}
