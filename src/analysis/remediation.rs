//! What to tell people to change, per kind of finding (DESIGN.md, "Memory
//! accounting", remediations).
//!
//! Owns: the wording only, as constants, so findings, alerts, the REST API
//! and docs all say the same thing. Depends on nothing.

/// Free pieces of split segments pile up (high `inactive_split / reserved`).
pub const FRAGMENTATION: &str = "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch 2.1+) \
so segments grow instead of splitting, or max_split_size_mb:<MB> to stop large blocks \
from being split";

/// A large releasable allocator cache held while the device is short of
/// memory (a neighbour starves, or the next phase needs room).
pub const RELEASE_CACHE: &str = "call torch.cuda.empty_cache() between phases (e.g. after \
training, before evaluation or checkpointing) to hand cached, unused blocks back to \
the device";

/// The allocator had to flush its cache to allocate, or raised OOMs.
pub const ALLOCATION_PRESSURE: &str = "reduce peak memory: smaller batches (with gradient \
accumulation to keep the effective batch size), activation checkpointing, mixed \
precision (bf16/fp16 autocast)";

/// One allocation asked for more than the whole device holds.
pub const REQUEST_BEYOND_DEVICE: &str = "check the shape behind this allocation (batch size, \
sequence length, a dimension multiplied by mistake): it needs more than the whole GPU; process it \
in chunks, shard it across devices (tensor or pipeline parallelism), or run it on a larger device";

/// Steady growth that never returns to its baseline.
pub const LEAK: &str = "look for tensors kept alive across iterations: accumulating the loss \
or metrics without .item() or .detach(), lists or dicts of outputs that grow every step, \
caches keyed by input, and references held by hooks or closures";

/// NVML usage risen in a few large steps, no allocator statistics.
pub const CACHE_OR_LEAK: &str = "attach the reporter to tell them apart (clients/python: allocator statistics show whether allocated memory grows, a leak, or only the cache the allocator keeps for the largest batch so far, which stays and is no leak)";

/// An inference process holding autograd state it never uses.
pub const INFERENCE_AUTOGRAD: &str = "run inference under torch.inference_mode() (or \
torch.no_grad()) so no autograd graph or saved activations are kept";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remediations_name_the_concrete_settings() {
        assert!(FRAGMENTATION.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
        assert!(FRAGMENTATION.contains("max_split_size_mb"));
        assert!(RELEASE_CACHE.contains("torch.cuda.empty_cache()"));
        for step in ["smaller batches", "gradient", "checkpointing", "mixed precision"] {
            assert!(ALLOCATION_PRESSURE.contains(step), "{step}");
        }
        assert!(LEAK.contains(".item()") && LEAK.contains(".detach()"));
        assert!(INFERENCE_AUTOGRAD.contains("inference_mode()"));
        assert!(CACHE_OR_LEAK.starts_with("attach the reporter to tell them apart"));
    }
}
