//! One traced call as the BPF program sends it (`struct event` in
//! `bpf/driver_trace.bpf.c`), decoded from the ring buffer's bytes without
//! any pointer cast.

/// Bytes of one event in the ring buffer.
pub const EVENT_SIZE: usize = 32;

/// Which call an event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `cuMemAlloc_v2`, `cuMemAllocPitch_v2` (size: pitch × height),
    /// `cuMemAllocAsync`, `cuMemAllocFromPoolAsync`, `cuMemAllocManaged`:
    /// `address` is the device pointer.
    Alloc,
    /// `cuMemFree_v2`, `cuMemFreeAsync`.
    Free,
    /// `cuMemCreate`: a physical allocation; `address` is its handle.
    Create,
    /// `cuMemRelease` of a handle.
    Release,
    /// `cuCtxCreate_v2`: `address` is the new context, `device` its device;
    /// it became the calling thread's current context.
    ContextCreate,
    /// `cuDevicePrimaryCtxRetain`: `address` is the device's primary
    /// context, `device` the device; not made current.
    PrimaryContext,
    /// `cuCtxSetCurrent(address)`: replaces the thread's current context
    /// (a null one unbinds it).
    SetCurrent,
    /// `cuCtxPushCurrent_v2(address)`.
    PushCurrent,
    /// `cuCtxPopCurrent_v2`.
    PopCurrent,
    /// `cuCtxDestroy_v2(address)`.
    ContextDestroy,
}

impl EventKind {
    fn from_code(code: u16) -> Option<Self> {
        Some(match code {
            1 => Self::Alloc,
            2 => Self::Free,
            3 => Self::Create,
            4 => Self::Release,
            5 => Self::ContextCreate,
            6 => Self::PrimaryContext,
            7 => Self::SetCurrent,
            8 => Self::PushCurrent,
            9 => Self::PopCurrent,
            10 => Self::ContextDestroy,
            _ => return None,
        })
    }

    /// Whether the call takes memory.
    pub fn allocates(self) -> bool {
        matches!(self, Self::Alloc | Self::Create)
    }

    /// Whether the call gives memory back.
    pub fn frees(self) -> bool {
        matches!(self, Self::Free | Self::Release)
    }
}

/// One traced call, at its return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The process (thread group id).
    pub pid: u32,
    pub tid: u32,
    pub kind: EventKind,
    /// The call's `CUresult`: 0 success, 2 `CUDA_ERROR_OUT_OF_MEMORY`.
    /// Frees and releases are sent from their entry, before the driver
    /// answers, so theirs is always 0.
    pub result: i32,
    /// Bytes requested (allocations; 0 for frees).
    pub size: u64,
    /// The new pointer or handle (allocations that succeeded), the one
    /// given back (frees), else 0.
    pub address: u64,
    /// The device ordinal the arguments name (`cuMemCreate`, the context
    /// calls), else `None`.
    pub device: Option<u32>,
}

impl Event {
    /// Decodes one ring-buffer record; `None` when it is not an event of
    /// this program's layout.
    pub fn decode(bytes: &[u8]) -> Option<Event> {
        if bytes.len() < EVENT_SIZE {
            return None;
        }
        let u64_at = |at: usize| bytes.get(at..at + 8)?.try_into().ok().map(u64::from_ne_bytes);
        let u32_at = |at: usize| bytes.get(at..at + 4)?.try_into().ok().map(u32::from_ne_bytes);
        let i32_at = |at: usize| bytes.get(at..at + 4)?.try_into().ok().map(i32::from_ne_bytes);
        let i16_at = |at: usize| bytes.get(at..at + 2)?.try_into().ok().map(i16::from_ne_bytes);
        let u16_at = |at: usize| bytes.get(at..at + 2)?.try_into().ok().map(u16::from_ne_bytes);
        Some(Event {
            size: u64_at(0)?,
            address: u64_at(8)?,
            pid: u32_at(16)?,
            tid: u32_at(20)?,
            result: i32_at(24)?,
            device: u32::try_from(i16_at(28)?).ok(),
            kind: EventKind::from_code(u16_at(30)?)?,
        })
    }

    /// Whether the call did what it was asked.
    pub fn succeeded(&self) -> bool {
        self.result == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u16, result: i32, device: i16) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&(1u64 << 20).to_ne_bytes());
        bytes.extend_from_slice(&0x7f00_0000_0000u64.to_ne_bytes());
        bytes.extend_from_slice(&42u32.to_ne_bytes());
        bytes.extend_from_slice(&43u32.to_ne_bytes());
        bytes.extend_from_slice(&result.to_ne_bytes());
        bytes.extend_from_slice(&device.to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes
    }

    #[test]
    fn a_record_decodes_field_by_field() {
        let event = Event::decode(&record(3, 2, 1)).unwrap();
        assert_eq!(
            event,
            Event {
                pid: 42,
                tid: 43,
                kind: EventKind::Create,
                result: 2,
                size: 1 << 20,
                address: 0x7f00_0000_0000,
                device: Some(1),
            }
        );
        assert!(!event.succeeded());
        assert_eq!(Event::decode(&record(1, 0, -1)).unwrap().device, None);
    }

    #[test]
    fn short_records_and_unknown_kinds_are_refused() {
        assert_eq!(Event::decode(&record(1, 0, -1)[..EVENT_SIZE - 1]), None);
        assert_eq!(Event::decode(&record(11, 0, -1)), None);
    }
}
