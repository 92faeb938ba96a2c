//! The strings a simulated host repeats on every slow sample (process names,
//! container IDs), each made once and then shared, as the NVML source
//! shares what it read from /proc: a simulated sample costs no allocation
//! per process for them either.
//!
//! Bounded: names are the scenarios' string literals (a fixed set in the
//! program); container IDs are kept per device for the PIDs of the device's
//! latest list only. Depends on `model` only.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::model::SharedStr;

#[derive(Debug, Default)]
pub(super) struct Names {
    names: Mutex<HashMap<&'static str, SharedStr>>,
    container_ids: Mutex<HashMap<u32, HashMap<u32, SharedStr>>>,
}

impl Names {
    pub(super) fn name(&self, name: &'static str) -> SharedStr {
        self.names.lock().entry(name).or_insert_with(|| SharedStr::from(name)).clone()
    }

    /// The container ID of each PID listed on device `index` (in the same
    /// order), made by `make` the first time; PIDs no longer listed are
    /// forgotten.
    pub(super) fn container_ids(
        &self,
        index: u32,
        pids: impl Iterator<Item = u32>,
        make: impl Fn(u32) -> String,
    ) -> Vec<SharedStr> {
        let mut devices = self.container_ids.lock();
        let known = devices.entry(index).or_default();
        let mut listed = HashMap::with_capacity(known.len());
        let ids = pids
            .map(|pid| {
                let id = known.remove(&pid).unwrap_or_else(|| SharedStr::from(make(pid)));
                listed.insert(pid, id.clone());
                id
            })
            .collect();
        *known = listed;
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_or_container_id_is_made_once_and_forgotten_with_its_process() {
        let names = Names::default();
        assert!(SharedStr::ptr_eq(&names.name("python3"), &names.name("python3")));
        let first = names.container_ids(0, [7, 8].into_iter(), |pid| format!("c{pid}"));
        let again = names.container_ids(0, [8].into_iter(), |pid| format!("c{pid}"));
        assert_eq!(again, ["c8"]);
        assert!(SharedStr::ptr_eq(&first[1], &again[0]));
        let back = names.container_ids(0, [7].into_iter(), |pid| format!("c{pid}"));
        assert!(!SharedStr::ptr_eq(&first[0], &back[0]), "7 left and came back: made anew");
        assert_eq!(names.container_ids.lock()[&0].len(), 1);
    }
}
