//! `[nvml]`: the real driver source (used when neither `source.simulate`
//! nor `source.replay` is set). Depends only on `setting`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{ByteSize, Form, KIB, Keys, mins, ms, secs};

/// `[nvml]`; `library_path` is not checked for existence at load time.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NvmlConfig {
    /// load NVML from this file instead of the system's libnvidia-ml.so.1
    pub library_path: Option<PathBuf>,
    /// exit with status 1 when NVML cannot be initialised, instead of retrying
    pub require_gpu: bool,
    // NVML init can take seconds with persistence mode off.
    /// deadline for initialising NVML and listing devices
    pub init_timeout: Duration,
    /// read PCIe TX/RX throughput on the slow tier (blocks ~20ms per direction)
    pub pcie_throughput: bool,
    /// longest process command line kept, truncated beyond; 0 turns them off
    pub max_cmdline_bytes: ByteSize,
    /// watch NVML Xid error events on a dedicated thread
    pub xid_events: bool,
}

impl Default for NvmlConfig {
    fn default() -> Self {
        Self {
            library_path: None,
            require_gpu: false,
            init_timeout: secs(30),
            pcie_throughput: false,
            max_cmdline_bytes: ByteSize(256),
            xid_events: true,
        }
    }
}

impl NvmlConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.words("library_path", Form::Path, "path; not set by default");
        keys.flag("require_gpu");
        keys.duration("init_timeout", self.init_timeout, ms(100), mins(10));
        keys.flag("pcie_throughput");
        keys.size("max_cmdline_bytes", self.max_cmdline_bytes, 0, 64 * KIB);
        keys.flag("xid_events");
    }
}
