//! Kubernetes attribution: which pod holds each GPU and each process.
//!
//! Owns: polling the kubelet's pod-resources API (device allocations) and
//! the CRI runtime service (container ID → pod) on their own interval, each
//! call under a deadline, and at once (rate-limited) when a reading has a
//! process in a container never asked about (`lookup`), and publishing the
//! latest [`Attribution`] on an [`AttributionBoard`] that the source's
//! joiner joins onto slow readings.
//! A side path: a missing, hung or garbled socket leaves the last good
//! answer (or none) in place and never stops sampling (a reading waits for
//! a lookup at most `kubernetes.lookup_wait`, once per container); an
//! absent socket is logged once and shown as `vramd_kubernetes_up 0`.
//! Depends on `model`, `telemetry` and `setting`; never on the sampler, history or
//! HTTP (the wiring hands the board to the source's joiner as part of a
//! join function).

mod access;
mod attribution;
mod client;
mod config;
mod lookup;
pub mod proto;

use std::pin::pin;
use std::sync::Arc;

use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::model::{DeviceInfo, SlowReading};
use crate::telemetry::Telemetry;
use lookup::Lookups;

pub use access::Refusal;
pub use attribution::{
    Attribution, DRA_GPU_DRIVER, DeviceAllocation, PodRef, allocatable_devices, allocations,
    containers, device_matches, dra_device_id, is_gpu_resource, share_unchanged, split_replica,
};
pub use client::{
    CallError, DeniedBecause, get_allocatable_resources, list_containers, list_pod_resources,
};
pub use config::KubernetesConfig;

/// The `api` label of the kubelet's pod-resources API.
pub const API_POD_RESOURCES: &str = "pod_resources";
/// The `api` label of the CRI runtime service.
pub const API_RUNTIME: &str = "runtime";

impl KubernetesConfig {
    /// Largest answer decoded: room for `max_containers` entries of a few
    /// KiB each (labels, annotations, IDs), so a garbled or hostile answer
    /// cannot make the daemon allocate without bound.
    pub fn max_message_bytes(&self) -> usize {
        self.max_containers.get().saturating_mul(8 * 1024).max(64 * 1024)
    }
}

/// The latest [`Attribution`]; the poller writes, the source's joiner
/// reads, and asks the poller about containers it cannot place.
#[derive(Debug)]
pub struct AttributionBoard {
    latest: RwLock<Arc<Attribution>>,
    lookups: Lookups,
}

impl AttributionBoard {
    pub fn new(settings: &KubernetesConfig) -> Self {
        Self {
            latest: RwLock::default(),
            lookups: Lookups::new(settings.lookup_wait, settings.max_containers.get()),
        }
    }

    pub fn latest(&self) -> Arc<Attribution> {
        self.latest.read().clone()
    }

    /// Joins the latest attribution onto one device's slow reading. A
    /// process in a container never asked about makes the poller refresh
    /// at once (rate-limited), and this reading waits for that refresh up
    /// to `kubernetes.lookup_wait`, so a new process is exported with its
    /// pod from its first sample on.
    pub fn join(&self, info: &DeviceInfo, reading: &mut SlowReading) {
        let latest = self.latest();
        latest.join(info, reading);
        if self.lookups.ask(latest.unplaced(reading)) {
            self.latest().join(info, reading);
        }
    }

    fn publish(&self, attribution: Attribution) {
        *self.latest.write() = Arc::new(attribution);
    }
}

/// Runs until `cancel` fires: refreshes both APIs every
/// `refresh_interval`, the first time at once, and between those when a
/// reading wants a container placed, at most once per `lookup_interval`
/// after any refresh.
pub async fn run(
    settings: KubernetesConfig,
    board: Arc<AttributionBoard>,
    telemetry: Arc<Telemetry>,
    cancel: CancellationToken,
) {
    let mut ticker = tokio::time::interval(settings.refresh_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (kubelet, runtime) = (ApiState::Unknown, ApiState::Unknown);
    let lookup_interval = settings.lookup_interval;
    let mut poller =
        Poller { settings, board, telemetry, kubelet, runtime, allocatable_offered: true };
    let mut cooldown = pin!(tokio::time::sleep(std::time::Duration::ZERO));
    loop {
        // Only the periodic refresh asks what is allocatable: a lookup is
        // about a new container, and that set changes only with hardware.
        let periodic = tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticker.tick() => true,
            () = async {
                (&mut cooldown).await;
                poller.board.lookups.wanted().await;
            } => {
                // A wake-up left over from IDs a periodic refresh took.
                if !poller.board.lookups.any_wanted() {
                    continue;
                }
                poller.telemetry.count_kubernetes_lookup();
                false
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = poller.refresh(periodic) => {}
        }
        cooldown.set(tokio::time::sleep(lookup_interval));
    }
}

/// What one API answered last, so that only changes are logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ApiState {
    Unknown,
    Up,
    Failing(&'static str),
}

struct Poller {
    settings: KubernetesConfig,
    board: Arc<AttributionBoard>,
    telemetry: Arc<Telemetry>,
    kubelet: ApiState,
    runtime: ApiState,
    /// False once the kubelet answered `GetAllocatableResources` with
    /// `Unimplemented`: it is not asked again until the kubelet has been
    /// seen failing and answering again (restarted, perhaps upgraded).
    allocatable_offered: bool,
}

impl Poller {
    /// One refresh of both APIs (concurrently, each under its deadline),
    /// then one publication; `periodic` also asks the kubelet what it
    /// could allocate.
    async fn refresh(&mut self, periodic: bool) {
        self.board.lookups.refresh_started();
        self.ask_and_publish(periodic).await;
        self.board.lookups.refresh_finished();
    }

    async fn ask_and_publish(&mut self, periodic: bool) {
        let settings = &self.settings;
        let (max, max_message) = (settings.max_containers.get(), settings.max_message_bytes());
        let (socket, deadline) = (&settings.pod_resources_socket, settings.call_timeout);
        let ask_allocatable = periodic && self.allocatable_offered;
        let (kubelet, runtime, allocatable) = tokio::join!(
            list_pod_resources(socket, deadline, max_message),
            list_containers(&settings.runtime_socket, deadline, max_message),
            async {
                match ask_allocatable {
                    true => Some(get_allocatable_resources(socket, deadline, max_message).await),
                    false => None,
                }
            },
        );
        let previous = self.board.latest();
        let mut next = Attribution::default();
        match kubelet {
            Ok(answer) => {
                let (kept, dropped) = allocations(answer, max);
                warn_dropped(dropped, max, "kubelet listed more GPU allocations");
                next.allocations = Some(kept);
                // A kubelet back from a failure may be a new version (an
                // upgrade restarts it): it may offer what the old did not.
                if matches!(self.kubelet, ApiState::Failing(_)) {
                    self.allocatable_offered = true;
                }
                self.kubelet = note(&self.telemetry, API_POD_RESOURCES, self.kubelet, None);
            }
            Err(error) => {
                self.kubelet = note(&self.telemetry, API_POD_RESOURCES, self.kubelet, Some(&error));
            }
        }
        match runtime {
            Ok(answer) => {
                let (mut table, dropped) = containers(answer, max);
                share_unchanged(&mut table, previous.containers.as_ref());
                warn_dropped(dropped, max, "the container runtime listed more pod containers");
                next.containers = Some(table);
                self.runtime = note(&self.telemetry, API_RUNTIME, self.runtime, None);
            }
            Err(error) => {
                next.containers.clone_from(&previous.containers);
                self.runtime = note(&self.telemetry, API_RUNTIME, self.runtime, Some(&error));
            }
        }
        next.allocatable = match allocatable {
            Some(Ok(answer)) => {
                let (ids, dropped) = allocatable_devices(answer, max);
                warn_dropped(dropped, max, "the kubelet listed more allocatable GPUs");
                Some(ids)
            }
            Some(Err(error)) if error.is_unimplemented() => {
                info!(error = %error, "the kubelet does not offer GetAllocatableResources; vramd_device_allocatable is not exported");
                self.allocatable_offered = false;
                None
            }
            // The allocation list's own failure is the one reported; this
            // set changes only with hardware, so the last answer stands.
            Some(Err(error)) => {
                debug!(error = %error, "GetAllocatableResources failed; keeping its last answer");
                previous.allocatable.clone()
            }
            None => previous.allocatable.clone(),
        };
        self.board.publish(next);
    }
}

/// Entries of an answer beyond `kubernetes.max_containers`, left out.
fn warn_dropped(dropped: usize, max: usize, listed: &str) {
    if dropped > 0 {
        warn!(dropped, max, "{listed} than kubernetes.max_containers; the rest are left out");
    }
}

/// Exports how `api` answered (`failure`: why it did not) and logs a
/// change from `before`; returns the state now.
fn note(
    telemetry: &Telemetry,
    api: &'static str,
    before: ApiState,
    failure: Option<&CallError>,
) -> ApiState {
    telemetry.set_kubernetes_up(api, failure.is_none());
    let now = failure.map_or(ApiState::Up, |error| {
        let kind: &'static str = error.into();
        telemetry.count_kubernetes_error(api, kind);
        ApiState::Failing(kind)
    });
    if before != now {
        match failure {
            None => info!(api, "Kubernetes API answered; attributing GPUs and processes to pods"),
            // Expected off Kubernetes or without the mount: a fact, not a fault.
            Some(error @ CallError::Absent { .. }) => {
                info!(api, error = %error, "Kubernetes API socket absent; no pod attribution from it")
            }
            // Retrying cannot help until the deployment changes: the
            // error names the setting to change.
            Some(error @ CallError::Denied { .. }) => {
                warn!(api, error = %error, "Kubernetes API socket refuses vramd's user; no pod attribution from it until the setting named is changed")
            }
            Some(error) => {
                warn!(api, error = %error, "Kubernetes API call failed; retrying every kubernetes.refresh_interval")
            }
        }
    }
    now
}

#[cfg(test)]
mod tests;
