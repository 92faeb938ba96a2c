//! One traced call as the BPF program sends it (`struct event` in
//! `bpf/driver_trace.bpf.c`), decoded from the ring buffer's bytes without
//! any pointer cast.

/// Bytes of one event in the ring buffer.
pub const EVENT_SIZE: usize = 48;

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
}

impl EventKind {
    fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            1 => Self::Alloc,
            2 => Self::Free,
            3 => Self::Create,
            4 => Self::Release,
            _ => return None,
        })
    }

    /// Whether the call takes memory (else it gives some back).
    pub fn allocates(self) -> bool {
        matches!(self, Self::Alloc | Self::Create)
    }
}

/// One traced call, at its return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// `CLOCK_MONOTONIC` nanoseconds at the return.
    pub timestamp_ns: u64,
    /// The process (thread group id).
    pub pid: u32,
    pub tid: u32,
    pub kind: EventKind,
    /// The call's `CUresult`: 0 success, 2 `CUDA_ERROR_OUT_OF_MEMORY`.
    pub result: i32,
    /// Bytes requested (allocations; 0 for frees).
    pub size: u64,
    /// The new pointer or handle (allocations that succeeded), the one
    /// given back (frees), else 0.
    pub address: u64,
    /// The device ordinal the arguments name (`cuMemCreate`), else `None`.
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
        Some(Event {
            timestamp_ns: u64_at(0)?,
            pid: u32_at(8)?,
            tid: u32_at(12)?,
            kind: EventKind::from_code(u32_at(16)?)?,
            result: i32_at(20)?,
            size: u64_at(24)?,
            address: u64_at(32)?,
            device: u32::try_from(i32_at(40)?).ok(),
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

    fn record(kind: u32, result: i32, device: i32) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&7u64.to_ne_bytes());
        bytes.extend_from_slice(&42u32.to_ne_bytes());
        bytes.extend_from_slice(&43u32.to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&result.to_ne_bytes());
        bytes.extend_from_slice(&(1u64 << 20).to_ne_bytes());
        bytes.extend_from_slice(&0x7f00_0000_0000u64.to_ne_bytes());
        bytes.extend_from_slice(&device.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes
    }

    #[test]
    fn a_record_decodes_field_by_field() {
        let event = Event::decode(&record(3, 2, 1)).unwrap();
        assert_eq!(
            event,
            Event {
                timestamp_ns: 7,
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
        assert_eq!(Event::decode(&record(9, 0, -1)), None);
    }
}
