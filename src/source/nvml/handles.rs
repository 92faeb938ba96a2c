//! The listed devices' handles, found by index on every read.
//!
//! Owns: one slot per index the last listing returned, sorted by index, so
//! a read finds its handle by a binary search over a few contiguous entries
//! rather than a SipHash of the index and a probe into a hash table (a fast
//! read is a few µs, and this runs 800 times a second at 8 GPUs × 100 Hz).
//! Must not depend on anything outside `source::nvml`.

/// Slots by index; `T` is the kept handle.
pub(super) struct Handles<T> {
    /// Sorted by index, one entry per index.
    slots: Vec<(u32, Option<T>)>,
}

impl<T> Default for Handles<T> {
    fn default() -> Self {
        Self { slots: Vec::new() }
    }
}

impl<T> Handles<T> {
    /// The slots of a listing; a repeated index keeps its last slot.
    pub(super) fn listed(slots: impl IntoIterator<Item = (u32, Option<T>)>) -> Self {
        let mut slots: Vec<_> = slots.into_iter().collect();
        // Stable: of equal indices the last listed stays last.
        slots.sort_by_key(|(index, _)| *index);
        slots.reverse();
        slots.dedup_by_key(|(index, _)| *index);
        slots.reverse();
        Self { slots }
    }

    fn position(&self, index: u32) -> Option<usize> {
        self.slots.binary_search_by_key(&index, |(listed, _)| *listed).ok()
    }

    /// Whether the listing returned `index`.
    pub(super) fn contains(&self, index: u32) -> bool {
        self.position(index).is_some()
    }

    /// The handle kept for `index`, if listed and kept.
    pub(super) fn get(&self, index: u32) -> Option<&T> {
        self.slots.get(self.position(index)?)?.1.as_ref()
    }

    /// The slot of a listed `index`; `None` for an index not listed (its
    /// handle is not kept, so the slots never outgrow the listing).
    pub(super) fn slot(&mut self, index: u32) -> Option<&mut Option<T>> {
        let at = self.position(index)?;
        self.slots.get_mut(at).map(|(_, slot)| slot)
    }
}

#[cfg(test)]
mod tests {
    use super::Handles;

    #[test]
    fn only_listed_indices_have_slots_and_the_last_listing_of_one_wins() {
        let listed = [(10_001, None), (1, Some("b")), (0, Some("a")), (1, Some("c"))];
        let mut handles = Handles::listed(listed);
        assert_eq!(handles.get(0), Some(&"a"));
        assert_eq!(handles.get(1), Some(&"c"));
        assert_eq!(handles.get(10_001), None, "listed, looked up on first read");
        assert!(handles.contains(10_001));
        assert!(!handles.contains(2));
        assert!(handles.slot(2).is_none(), "an unlisted index is never kept");
        if let Some(slot) = handles.slot(10_001) {
            *slot = Some("mig");
        }
        assert_eq!(handles.get(10_001), Some(&"mig"));
    }
}
