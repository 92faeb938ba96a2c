//! Which device a process's `cuMemAlloc*` lands on: the calling thread's
//! current context's. Follows, per process, the contexts the driver handed
//! out (`cuCtxCreate_v2`, `cuDevicePrimaryCtxRetain`: handle → device) and
//! each thread's stack of current contexts (`cuCtxCreate_v2` and
//! `cuCtxPushCurrent_v2` push, `cuCtxPopCurrent_v2` pops,
//! `cuCtxSetCurrent` replaces the top), within
//! `driver_trace.max_contexts`. Pure: no I/O.
//!
//! The device is the CUDA ordinal the process named, which is NVML's index
//! unless the process sees a subset of the devices (`CUDA_VISIBLE_DEVICES`);
//! the board attributes an ordinal no listing device has to the process's
//! lowest one.

use std::collections::HashMap;

use ::driver_trace::{Event, EventKind};

#[derive(Default)]
pub struct Contexts {
    /// Context handle → the device ordinal it was made on.
    devices: HashMap<u64, u32>,
    /// Thread id → its current contexts, the last one current.
    stacks: HashMap<u32, Vec<u64>>,
}

impl Contexts {
    /// Follows one context call; `false` when it was not one. Beyond
    /// `max` contexts or threads (or a stack `max` deep) what is new is not
    /// kept: that thread's allocations land on no known device.
    pub fn apply(&mut self, event: &Event, max: usize) -> bool {
        let context = event.address;
        match event.kind {
            EventKind::ContextCreate | EventKind::PrimaryContext => {
                if !event.succeeded() {
                    return true;
                }
                if let Some(device) = event.device
                    && (self.devices.len() < max || self.devices.contains_key(&context))
                {
                    self.devices.insert(context, device);
                }
                if event.kind == EventKind::ContextCreate {
                    self.push(event.tid, context, max);
                }
            }
            EventKind::SetCurrent => {
                self.stack(event.tid, max).and_then(Vec::pop);
                self.push(event.tid, context, max);
            }
            EventKind::PushCurrent => self.push(event.tid, context, max),
            EventKind::PopCurrent => {
                self.stack(event.tid, max).and_then(Vec::pop);
            }
            EventKind::ContextDestroy => {
                self.devices.remove(&context);
                for stack in self.stacks.values_mut() {
                    stack.retain(|current| *current != context);
                }
                self.stacks.retain(|_, stack| !stack.is_empty());
            }
            _ => return false,
        }
        true
    }

    /// The device of the thread's current context, when known.
    pub fn device_of_thread(&self, tid: u32) -> Option<u32> {
        let current = self.stacks.get(&tid)?.last()?;
        self.devices.get(current).copied()
    }

    fn stack(&mut self, tid: u32, max: usize) -> Option<&mut Vec<u64>> {
        if self.stacks.len() >= max && !self.stacks.contains_key(&tid) {
            return None;
        }
        Some(self.stacks.entry(tid).or_default())
    }

    fn push(&mut self, tid: u32, context: u64, max: usize) {
        if context == 0 {
            return;
        }
        if let Some(stack) = self.stack(tid, max)
            && stack.len() < max
        {
            stack.push(context);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tid: u32, kind: EventKind, context: u64, device: Option<u32>) -> Event {
        Event { pid: 1, tid, kind, result: 0, size: 0, address: context, device }
    }

    #[test]
    fn each_thread_allocates_on_its_current_contexts_device() {
        let mut contexts = Contexts::default();
        let max = 8;
        for event in [
            call(10, EventKind::ContextCreate, 0xa, Some(0)),
            call(10, EventKind::PrimaryContext, 0xb, Some(1)),
            call(11, EventKind::SetCurrent, 0xb, None),
        ] {
            assert!(contexts.apply(&event, max));
        }
        assert_eq!(contexts.device_of_thread(10), Some(0), "created: current");
        assert_eq!(contexts.device_of_thread(11), Some(1), "retained, then set");
        contexts.apply(&call(10, EventKind::PushCurrent, 0xb, None), max);
        assert_eq!(contexts.device_of_thread(10), Some(1));
        contexts.apply(&call(10, EventKind::PopCurrent, 0, None), max);
        assert_eq!(contexts.device_of_thread(10), Some(0));
        contexts.apply(&call(10, EventKind::SetCurrent, 0xb, None), max);
        assert_eq!(contexts.device_of_thread(10), Some(1), "set replaces the top");
        contexts.apply(&call(10, EventKind::SetCurrent, 0, None), max);
        assert_eq!(contexts.device_of_thread(10), None, "a null context unbinds");
        contexts.apply(&call(11, EventKind::ContextDestroy, 0xb, None), max);
        assert_eq!(contexts.device_of_thread(11), None);
        assert!(!contexts.apply(&call(11, EventKind::Alloc, 0, None), max));
    }

    #[test]
    fn what_exceeds_the_bound_is_not_kept() {
        let mut contexts = Contexts::default();
        contexts.apply(&call(1, EventKind::ContextCreate, 0xa, Some(0)), 1);
        contexts.apply(&call(2, EventKind::ContextCreate, 0xb, Some(1)), 1);
        assert_eq!(contexts.device_of_thread(1), Some(0));
        assert_eq!(contexts.device_of_thread(2), None, "a second context, a second thread");
    }
}
