// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
// (The kernel lets a program call bpf_probe_read_user only under a
// GPL-compatible license string, hence "GPL" below.)
//
// Uprobes on libcuda.so.1's device-memory allocation and free calls.
//
// An entry probe saves, per thread, what only the call's arguments say (the
// requested size, where the driver will write the new address, the device
// of a physical allocation); the return probe pairs it with the result
// (CUresult in the return register, the address the driver wrote) and sends
// one event through a bounded ring buffer. A full ring buffer or a full
// in-flight table drops the event and counts it: the program never waits.
//
// Built by build.sh into driver_trace.bpf.o, which is committed: a Rust
// build needs no clang. crates/driver-trace/tests/object.rs rebuilds it and
// compares when the same clang is present.
//
// No kernel structure is read (only the probed process's registers and its
// own memory), so no BTF of the kernel and no CO-RE relocation is needed.

#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

// Event kinds (driver_trace::EventKind).
#define KIND_ALLOC 1   // cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemAllocManaged
#define KIND_FREE 2    // cuMemFree_v2, cuMemFreeAsync
#define KIND_CREATE 3  // cuMemCreate: a physical allocation, named by its handle
#define KIND_RELEASE 4 // cuMemRelease

// Slots of the `counters` array (driver_trace::Counters).
#define COUNTER_RING_FULL 0
#define COUNTER_IN_FLIGHT_FULL 1
#define COUNTER_UNPAIRED_RETURN 2
#define COUNTERS 3

// Pending bytes in the ring buffer that wake its reader (about 1300 events).
#define WAKEUP_BYTES (64 * 1024)

// Offset of CUmemAllocationProp.location.id (the device ordinal) in
// cuda.h: type (4 bytes), requestedHandleTypes (4), location.type (4).
#define PROP_LOCATION_ID_OFFSET 12

// One call on its way from entry to return.
struct in_flight {
	__u64 size; // for cuMemAllocPitch_v2, the height until the pitch is known
	__u64 pitch_out; // where cuMemAllocPitch_v2 writes the pitch; else 0
	__u64 out; // where the driver writes the address (or handle); 0 for frees
	__u64 address; // the freed address (or released handle)
	__s32 device; // -1: not known from the arguments
	__u32 kind;
};

// What user space reads; its layout is driver_trace::Event's.
struct event {
	__u64 timestamp_ns; // CLOCK_MONOTONIC (bpf_ktime_get_ns) at the return
	__u32 pid; // thread group id: the process
	__u32 tid;
	__u32 kind;
	__s32 result; // CUresult
	__u64 size;
	__u64 address; // device pointer or allocation handle; 0 when the call failed
	__s32 device;
	__u32 reserved;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); // pid_tgid: one call in flight per thread
	__type(value, struct in_flight);
} in_flight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); // bytes; the loader may change it
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &slot);
	if (value)
		*value += 1;
}

static __always_inline int enter(struct in_flight *call)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (bpf_map_update_elem(&in_flight, &id, call, BPF_ANY) != 0)
		count(COUNTER_IN_FLIGHT_FULL);
	return 0;
}

static __always_inline int leave(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct in_flight *call = bpf_map_lookup_elem(&in_flight, &id);
	if (!call) {
		count(COUNTER_UNPAIRED_RETURN);
		return 0;
	}
	struct event *event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
	if (!event) {
		count(COUNTER_RING_FULL);
		bpf_map_delete_elem(&in_flight, &id);
		return 0;
	}
	__s32 result = (__s32)PT_REGS_RC(ctx);
	event->timestamp_ns = bpf_ktime_get_ns();
	event->pid = id >> 32;
	event->tid = (__u32)id;
	event->kind = call->kind;
	event->result = result;
	event->size = call->size;
	event->address = call->address;
	event->device = call->device;
	event->reserved = 0;
	if (call->pitch_out && result == 0) {
		__u64 pitch = 0;
		if (bpf_probe_read_user(&pitch, sizeof(pitch), (void *)call->pitch_out) == 0)
			event->size = pitch * call->size;
	}
	if (call->out && result == 0) {
		__u64 written = 0;
		if (bpf_probe_read_user(&written, sizeof(written), (void *)call->out) == 0)
			event->address = written;
	}
	// Waking the reader for every call would cost a context switch per
	// call; it polls on a timeout anyway (100 ms), so it is woken only when
	// a batch is waiting.
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES
			      ? BPF_RB_FORCE_WAKEUP
			      : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(event, flags);
	bpf_map_delete_elem(&in_flight, &id);
	return 0;
}

// (CUdeviceptr *dptr, size_t bytesize, ...): every allocation call whose
// first two arguments are the out-pointer and the size.
SEC("uprobe")
int alloc_enter(struct pt_regs *ctx)
{
	struct in_flight call = {
		.size = PT_REGS_PARM2(ctx),
		.out = PT_REGS_PARM1(ctx),
		.device = -1,
		.kind = KIND_ALLOC,
	};
	return enter(&call);
}

// cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
//                    size_t Height, unsigned int ElementSizeBytes): the size
// is pitch x height, and the driver chooses the pitch.
SEC("uprobe")
int pitch_enter(struct pt_regs *ctx)
{
	struct in_flight call = {
		.size = PT_REGS_PARM4(ctx),
		.pitch_out = PT_REGS_PARM2(ctx),
		.out = PT_REGS_PARM1(ctx),
		.device = -1,
		.kind = KIND_ALLOC,
	};
	return enter(&call);
}

// cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
//             const CUmemAllocationProp *prop, unsigned long long flags)
SEC("uprobe")
int create_enter(struct pt_regs *ctx)
{
	struct in_flight call = {
		.size = PT_REGS_PARM2(ctx),
		.out = PT_REGS_PARM1(ctx),
		.device = -1,
		.kind = KIND_CREATE,
	};
	__s32 device = -1;
	__u64 prop = PT_REGS_PARM3(ctx);
	if (prop && bpf_probe_read_user(&device, sizeof(device),
					(void *)(prop + PROP_LOCATION_ID_OFFSET)) == 0)
		call.device = device;
	return enter(&call);
}

// (CUdeviceptr dptr, ...): cuMemFree_v2, cuMemFreeAsync.
SEC("uprobe")
int free_enter(struct pt_regs *ctx)
{
	struct in_flight call = {
		.address = PT_REGS_PARM1(ctx),
		.device = -1,
		.kind = KIND_FREE,
	};
	return enter(&call);
}

// cuMemRelease(CUmemGenericAllocationHandle handle)
SEC("uprobe")
int release_enter(struct pt_regs *ctx)
{
	struct in_flight call = {
		.address = PT_REGS_PARM1(ctx),
		.device = -1,
		.kind = KIND_RELEASE,
	};
	return enter(&call);
}

// The one return probe of every traced call.
SEC("uretprobe")
int call_return(struct pt_regs *ctx)
{
	return leave(ctx);
}

char LICENSE[] SEC("license") = "GPL";
