//! `[ingest]`: allocator reports and OOM events POSTed by workloads, the
//! snapshots uploaded for them, and their bounds. Depends only on
//! `setting`.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ReportLimits, StoreLimits};
use crate::setting::{ByteSize, Form, GIB, KIB, Keys, MIB, TIB, hours, mins, non_zero, secs};

/// `[ingest]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestConfig {
    /// file holding the bearer token writers from other hosts must send
    pub token_file: Option<PathBuf>,
    /// age after which an allocator report no longer counts
    pub ttl: Duration,
    /// allocator reports per second from one reporter
    #[serde(rename = "rate_limit")]
    pub rate_limit_per_second: NonZeroUsize,
    /// reporters tracked at once
    pub max_reporters: NonZeroUsize,
    /// devices in one allocator report
    pub max_devices: NonZeroUsize,
    /// memory_stats keys per device in a report
    pub max_stats: NonZeroUsize,
    /// allocator OOM events kept per device; the oldest is dropped beyond
    pub max_oom_events: NonZeroUsize,
    /// directory for allocator snapshots uploaded to OOM events
    pub snapshot_dir: Option<PathBuf>,
    /// bytes of all uploaded snapshots together; the oldest upload goes first beyond
    pub max_snapshot_bytes: ByteSize,
    /// bytes of one uploaded snapshot
    pub max_snapshot_upload: ByteSize,
    // Not server.request_timeout: a gigabyte in 10 s needs over 100 MB/s.
    /// a snapshot upload still running after this gets 408 (in place of server.request_timeout)
    pub snapshot_upload_timeout: Duration,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            token_file: None,
            ttl: secs(30),
            rate_limit_per_second: non_zero(10),
            max_reporters: non_zero(1024),
            max_devices: non_zero(16),
            max_stats: non_zero(1024),
            max_oom_events: non_zero(64),
            snapshot_dir: None,
            max_snapshot_bytes: ByteSize(4 * GIB),
            max_snapshot_upload: ByteSize(GIB),
            snapshot_upload_timeout: mins(5),
        }
    }
}

impl IngestConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.words("token_file", Form::Path, "path; not set by default (loopback only)");
        keys.duration("ttl", self.ttl, secs(1), hours(1));
        keys.count("rate_limit", self.rate_limit_per_second.get() as u64, 1, 1_000);
        keys.count("max_reporters", self.max_reporters.get() as u64, 1, 100_000);
        keys.count("max_devices", self.max_devices.get() as u64, 1, 64);
        keys.count("max_stats", self.max_stats.get() as u64, 1, 65_536);
        keys.count("max_oom_events", self.max_oom_events.get() as u64, 1, 10_000);
        keys.words("snapshot_dir", Form::Path, "path; not set by default (uploads refused)");
        keys.size("max_snapshot_bytes", self.max_snapshot_bytes, MIB, 16 * TIB);
        keys.size("max_snapshot_upload", self.max_snapshot_upload, KIB, 64 * GIB);
        keys.duration("snapshot_upload_timeout", self.snapshot_upload_timeout, secs(1), hours(24));
    }

    /// The report store's bounds.
    pub fn store_limits(&self) -> StoreLimits {
        StoreLimits {
            ttl: self.ttl,
            rate_limit_per_second: self.rate_limit_per_second.get(),
            max_reporters: self.max_reporters.get(),
        }
    }

    /// One report document's bounds.
    pub fn report_limits(&self) -> ReportLimits {
        ReportLimits { max_devices: self.max_devices.get(), max_stats: self.max_stats.get() }
    }
}
