// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
// (The kernel lets a program call bpf_probe_read_user only under a
// GPL-compatible license string, hence "GPL" below.)
//
// Uprobes on libcuda.so.1's device-memory allocation and free calls, and
// on the calls that make a context current (whose device an allocation
// is made on).
//
// An allocation's entry probe saves, in the calling thread's slot, what
// only the arguments say (the requested size, where the driver will write
// the new address, the device of a physical allocation); its return probe
// pairs that with the result (CUresult in the return register, the address
// the driver wrote) and sends one event through a bounded ring buffer.
// A free or release is sent from its entry probe alone: its arguments say
// all there is, and a return probe would double its cost for an answer
// vramd does not need (see release). A full ring buffer drops the event
// and counts it: the program never waits.
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
// The current context, which names the device of a cuMemAlloc*: the
// address is the context's handle, the device the CUdevice (its ordinal).
#define KIND_CONTEXT_CREATE 5 // cuCtxCreate_v2: a new context, made current
#define KIND_PRIMARY_CONTEXT 6 // cuDevicePrimaryCtxRetain: not made current
#define KIND_SET_CURRENT 7 // cuCtxSetCurrent
#define KIND_PUSH_CURRENT 8 // cuCtxPushCurrent_v2
#define KIND_POP_CURRENT 9 // cuCtxPopCurrent_v2
#define KIND_CONTEXT_DESTROY 10 // cuCtxDestroy_v2

// Slots of the `counters` array (driver_trace::Counters).
#define COUNTER_RING_FULL 0
#define COUNTER_IN_FLIGHT_FULL 1
#define COUNTER_UNPAIRED_RETURN 2
#define COUNTERS 3

// Pending bytes in the ring buffer that wake its reader (about 1600 events).
#define WAKEUP_BYTES (64 * 1024)

// Offset of CUmemAllocationProp.location.id (the device ordinal) in
// cuda.h: type (4 bytes), requestedHandleTypes (4), location.type (4).
#define PROP_LOCATION_ID_OFFSET 12

// Slots for allocation calls in flight: a thread uses the slot of its id
// modulo this (a power of two). An array slot is found by arithmetic the
// verifier inlines, where a hash table would hash, lock a bucket and copy
// on the way in and again on the way out.
#define SLOTS 16384

// One allocation call on its way from entry to return.
struct in_flight {
	__u64 thread; // pid_tgid of the caller; 0: the slot is free
	__u64 size; // for cuMemAllocPitch_v2, the height until the pitch is known
	__u64 pitch_out; // where cuMemAllocPitch_v2 writes the pitch; else 0
	__u64 out; // where the driver writes the address (or handle)
	__s32 device; // -1: not known from the arguments
	__u32 kind;
};

// What user space reads; its layout is driver_trace::Event's (32 bytes).
struct event {
	__u64 size;
	__u64 address; // device pointer or allocation handle; 0 when the call failed
	__u32 pid; // thread group id: the process
	__u32 tid;
	__s32 result; // CUresult
	__s16 device; // -1: not known from the arguments
	__u16 kind;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOTS);
	__type(key, __u32);
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

static __always_inline struct in_flight *slot_of(__u64 thread)
{
	__u32 key = (__u32)thread & (SLOTS - 1);
	return bpf_map_lookup_elem(&in_flight, &key);
}

// Waking the reader for every call would cost a context switch per call;
// it polls on a timeout anyway (100 ms), so it is woken only when a batch
// is waiting.
static __always_inline void submit(struct event *event)
{
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES
			      ? BPF_RB_FORCE_WAKEUP
			      : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(event, flags);
}

// Saves an allocation's arguments in the thread's slot. Two threads whose
// ids share a slot, both inside an allocation call at once: the later one
// takes it, the earlier one's call is lost and counted (its return finds
// another thread's call and is counted as unpaired).
static __always_inline int enter(__u64 size, __u64 out, __u64 pitch_out, __s32 device,
				 __u32 kind)
{
	__u64 thread = bpf_get_current_pid_tgid();
	struct in_flight *call = slot_of(thread);
	if (!call)
		return 0;
	if (call->thread != 0 && call->thread != thread)
		count(COUNTER_IN_FLIGHT_FULL);
	call->thread = thread;
	call->size = size;
	call->out = out;
	call->pitch_out = pitch_out;
	call->device = device;
	call->kind = kind;
	return 0;
}

// (CUdeviceptr *dptr, size_t bytesize, ...): every allocation call whose
// first two arguments are the out-pointer and the size.
SEC("uprobe")
int alloc_enter(struct pt_regs *ctx)
{
	return enter(PT_REGS_PARM2(ctx), PT_REGS_PARM1(ctx), 0, -1, KIND_ALLOC);
}

// cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
//                    size_t Height, unsigned int ElementSizeBytes): the size
// is pitch x height, and the driver chooses the pitch.
SEC("uprobe")
int pitch_enter(struct pt_regs *ctx)
{
	return enter(PT_REGS_PARM4(ctx), PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), -1, KIND_ALLOC);
}

// cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
//             const CUmemAllocationProp *prop, unsigned long long flags)
SEC("uprobe")
int create_enter(struct pt_regs *ctx)
{
	__s32 device = -1;
	__u64 prop = PT_REGS_PARM3(ctx);
	if (prop && bpf_probe_read_user(&device, sizeof(device),
					(void *)(prop + PROP_LOCATION_ID_OFFSET)) != 0)
		device = -1;
	return enter(PT_REGS_PARM2(ctx), PT_REGS_PARM1(ctx), 0, device, KIND_CREATE);
}

// cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
SEC("uprobe")
int context_enter(struct pt_regs *ctx)
{
	return enter(0, PT_REGS_PARM1(ctx), 0, (__s32)PT_REGS_PARM3(ctx), KIND_CONTEXT_CREATE);
}

// cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
SEC("uprobe")
int primary_enter(struct pt_regs *ctx)
{
	return enter(0, PT_REGS_PARM1(ctx), 0, (__s32)PT_REGS_PARM2(ctx), KIND_PRIMARY_CONTEXT);
}

// The one return probe, of every allocation call (and of the two calls
// that hand out a context).
SEC("uretprobe")
int alloc_return(struct pt_regs *ctx)
{
	__u64 thread = bpf_get_current_pid_tgid();
	struct in_flight *call = slot_of(thread);
	if (!call || call->thread != thread) {
		count(COUNTER_UNPAIRED_RETURN);
		return 0;
	}
	call->thread = 0;
	struct event *event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
	if (!event) {
		count(COUNTER_RING_FULL);
		return 0;
	}
	__s32 result = (__s32)PT_REGS_RC(ctx);
	event->size = call->size;
	event->address = 0;
	event->pid = thread >> 32;
	event->tid = (__u32)thread;
	event->result = result;
	event->device = (__s16)call->device;
	event->kind = call->kind;
	if (result == 0) {
		__u64 written = 0;
		if (bpf_probe_read_user(&written, sizeof(written), (void *)call->out) == 0)
			event->address = written;
		__u64 pitch = 0;
		if (call->pitch_out &&
		    bpf_probe_read_user(&pitch, sizeof(pitch), (void *)call->pitch_out) == 0)
			event->size = pitch * call->size;
	}
	submit(event);
	return 0;
}

// A free or release, sent from its entry: the address given back is all
// it says. Whether the driver then failed it (an address it never handed
// out, or a context already broken by a sticky error) is not asked: vramd
// removes only an address it saw allocated, and a process whose context
// is broken holds nothing usable any more, so a return probe would buy
// nothing for its cost (as much again as the entry's). The same holds for
// the calls that change the current context: they fail only when handed
// a context that is not one, which no working program does.
static __always_inline int release(__u64 address, __u32 kind)
{
	struct event *event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
	if (!event) {
		count(COUNTER_RING_FULL);
		return 0;
	}
	__u64 thread = bpf_get_current_pid_tgid();
	event->size = 0;
	event->address = address;
	event->pid = thread >> 32;
	event->tid = (__u32)thread;
	event->result = 0;
	event->device = -1;
	event->kind = kind;
	submit(event);
	return 0;
}

// (CUdeviceptr dptr, ...): cuMemFree_v2, cuMemFreeAsync.
SEC("uprobe")
int free_enter(struct pt_regs *ctx)
{
	return release(PT_REGS_PARM1(ctx), KIND_FREE);
}

// cuMemRelease(CUmemGenericAllocationHandle handle)
SEC("uprobe")
int release_enter(struct pt_regs *ctx)
{
	return release(PT_REGS_PARM1(ctx), KIND_RELEASE);
}

// cuCtxSetCurrent(CUcontext ctx)
SEC("uprobe")
int set_current_enter(struct pt_regs *ctx)
{
	return release(PT_REGS_PARM1(ctx), KIND_SET_CURRENT);
}

// cuCtxPushCurrent_v2(CUcontext ctx)
SEC("uprobe")
int push_current_enter(struct pt_regs *ctx)
{
	return release(PT_REGS_PARM1(ctx), KIND_PUSH_CURRENT);
}

// cuCtxPopCurrent_v2(CUcontext *pctx): pops the calling thread's current.
SEC("uprobe")
int pop_current_enter(struct pt_regs *ctx)
{
	return release(0, KIND_POP_CURRENT);
}

// cuCtxDestroy_v2(CUcontext ctx)
SEC("uprobe")
int context_destroy_enter(struct pt_regs *ctx)
{
	return release(PT_REGS_PARM1(ctx), KIND_CONTEXT_DESTROY);
}

char LICENSE[] SEC("license") = "GPL";
