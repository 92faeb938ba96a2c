//! Fake kubelet pod-resources and CRI runtime servers for the Kubernetes
//! attribution tests: real tonic gRPC servers on unix sockets in a temp
//! directory, encoding vramd's own hand-derived messages
//! (`vramd::kubernetes::proto`), so the daemon's client is driven end to end.
//!
//! Each [`FakeApi`] runs on its own runtime thread and stops when dropped.
//! Its answers can be changed while it runs ([`FakeApi::set_pods`],
//! [`FakeApi::set_containers`], [`FakeApi::garble`]).

// Shared by two test crates; each uses a different subset.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::Grpc;
use tonic_prost::ProstCodec;
use vramd::kubernetes::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ClaimResource, Container,
    ContainerDevices, ContainerMetadata, ContainerResources, DynamicResource,
    ListContainersRequest, ListContainersResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, POD_RESOURCES_GET_ALLOCATABLE, POD_RESOURCES_LIST, PodResources,
    RUNTIME_LIST_CONTAINERS,
};

/// Bytes that are not the expected message: tag 1 as a fixed64 where both
/// responses have a length-delimited repeated message.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Garbage {
    #[prost(fixed64, tag = "1")]
    pub word: u64,
}

#[derive(Default)]
struct Answers {
    pods: ListPodResourcesResponse,
    containers: ListContainersResponse,
    /// `None`: `GetAllocatableResources` is unimplemented, as on a kubelet
    /// older than 1.23 or with its feature gate off.
    allocatable: Option<AllocatableResourcesResponse>,
    garbage: bool,
    /// List calls (pods or containers) answered.
    calls: usize,
    allocatable_calls: usize,
}

/// One fake API server on one unix socket; it answers both methods (a real
/// kubelet or runtime answers only its own, which is all vramd asks).
pub struct FakeApi {
    pub socket: PathBuf,
    answers: Arc<Mutex<Answers>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FakeApi {
    /// Serves on `socket` (created; its directory must exist).
    pub fn serve(socket: &Path) -> Self {
        let answers = Arc::new(Mutex::new(Answers::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let listener = runtime.block_on(async { tokio::net::UnixListener::bind(socket) }).unwrap();
        let service = FakeService { answers: answers.clone() };
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
                let _ = tonic::transport::Server::builder()
                    .serve_with_incoming_shutdown(service, incoming, async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        Self { socket: socket.to_owned(), answers, stop: Some(stop), thread: Some(thread) }
    }

    pub fn set_pods(&self, pods: Vec<PodResources>) {
        self.answers.lock().unwrap().pods = ListPodResourcesResponse { pod_resources: pods };
    }

    pub fn set_containers(&self, containers: Vec<Container>) {
        self.answers.lock().unwrap().containers = ListContainersResponse { containers };
    }

    /// Offers `GetAllocatableResources`, answering these devices.
    pub fn set_allocatable(&self, devices: Vec<ContainerDevices>) {
        self.answers.lock().unwrap().allocatable = Some(AllocatableResourcesResponse { devices });
    }

    /// `GetAllocatableResources` calls answered (or refused) so far.
    pub fn allocatable_calls(&self) -> usize {
        self.answers.lock().unwrap().allocatable_calls
    }

    /// From now on, answer with bytes that do not decode as the response.
    pub fn garble(&self) {
        self.answers.lock().unwrap().garbage = true;
    }

    /// From now on, answer again as before [`FakeApi::garble`].
    pub fn heal(&self) {
        self.answers.lock().unwrap().garbage = false;
    }

    /// Calls answered so far.
    pub fn calls(&self) -> usize {
        self.answers.lock().unwrap().calls
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Bounded: the server drops idle connections on shutdown.
        if let Some(thread) = self.thread.take() {
            let deadline = crate::support::Deadline::after(crate::support::WAIT);
            while !thread.is_finished() && !deadline.passed() {
                crate::support::pause();
            }
        }
    }
}

#[derive(Clone)]
struct FakeService {
    answers: Arc<Mutex<Answers>>,
}

impl tower::Service<http::Request<Body>> for FakeService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let answers = self.answers.clone();
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            let (pods, containers, allocatable, garbage) = {
                let mut answers = answers.lock().unwrap();
                match path.as_str() {
                    POD_RESOURCES_GET_ALLOCATABLE => answers.allocatable_calls += 1,
                    _ => answers.calls += 1,
                }
                let allocatable = answers.allocatable.clone();
                (answers.pods.clone(), answers.containers.clone(), allocatable, answers.garbage)
            };
            let response = match (path.as_str(), garbage) {
                (POD_RESOURCES_GET_ALLOCATABLE, _) => match allocatable {
                    Some(allocatable) => {
                        let codec = ProstCodec::<
                            AllocatableResourcesResponse,
                            AllocatableResourcesRequest,
                        >::default();
                        Grpc::new(codec).unary(answer(allocatable), request).await
                    }
                    None => tonic::Status::unimplemented(path).into_http(),
                },
                (POD_RESOURCES_LIST, false) => {
                    let codec =
                        ProstCodec::<ListPodResourcesResponse, ListPodResourcesRequest>::default();
                    Grpc::new(codec).unary(answer(pods), request).await
                }
                (RUNTIME_LIST_CONTAINERS, false) => {
                    let codec =
                        ProstCodec::<ListContainersResponse, ListContainersRequest>::default();
                    Grpc::new(codec).unary(answer(containers), request).await
                }
                (POD_RESOURCES_LIST | RUNTIME_LIST_CONTAINERS, true) => {
                    let codec = ProstCodec::<Garbage, ListContainersRequest>::default();
                    Grpc::new(codec).unary(answer(Garbage { word: u64::MAX }), request).await
                }
                _ => tonic::Status::unimplemented(path).into_http(),
            };
            Ok(response)
        })
    }
}

/// A unary handler that answers `message` to any request.
fn answer<Req: Send + 'static, Resp: Clone + Send + 'static>(
    message: Resp,
) -> impl tower::Service<
    tonic::Request<Req>,
    Response = tonic::Response<Resp>,
    Error = tonic::Status,
    Future = impl Future<Output = Result<tonic::Response<Resp>, tonic::Status>> + Send,
> + Send {
    tower::service_fn(move |_: tonic::Request<Req>| {
        let message = message.clone();
        async move { Ok(tonic::Response::new(message)) }
    })
}

/// A socket that accepts connections (the kernel's backlog) but never
/// speaks: every call to it hangs until the caller's deadline.
pub struct HangingSocket {
    _listener: std::os::unix::net::UnixListener,
}

impl HangingSocket {
    pub fn bind(socket: &Path) -> Self {
        Self { _listener: std::os::unix::net::UnixListener::bind(socket).unwrap() }
    }
}

/// A kubelet pod with one container holding `device_ids` of `resource`.
pub fn pod(
    name: &str,
    namespace: &str,
    container: &str,
    resource: &str,
    device_ids: &[&str],
) -> PodResources {
    PodResources {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        containers: vec![ContainerResources {
            name: container.to_owned(),
            devices: vec![ContainerDevices {
                resource_name: resource.to_owned(),
                device_ids: device_ids.iter().map(|id| (*id).to_owned()).collect(),
            }],
            dynamic_resources: vec![],
        }],
    }
}

/// A kubelet pod whose one container holds `devices` of NVIDIA's DRA
/// driver through the `ResourceClaim` `claim` of its namespace.
pub fn claimed_pod(name: &str, namespace: &str, claim: &str, devices: &[&str]) -> PodResources {
    let mut holder = pod(name, namespace, "main", "nvidia.com/gpu", &[]);
    holder.containers[0].devices.clear();
    holder.containers[0].dynamic_resources = vec![DynamicResource {
        claim_name: claim.to_owned(),
        claim_namespace: namespace.to_owned(),
        claim_resources: devices
            .iter()
            .map(|device| ClaimResource {
                driver_name: "gpu.nvidia.com".to_owned(),
                pool_name: "node-1".to_owned(),
                device_name: (*device).to_owned(),
            })
            .collect(),
    }];
    holder
}

/// A CRI container with the labels the kubelet sets.
pub fn container(id: &str, pod: &str, namespace: &str, name: &str) -> Container {
    let labels = HashMap::from([
        ("io.kubernetes.pod.name".to_owned(), pod.to_owned()),
        ("io.kubernetes.pod.namespace".to_owned(), namespace.to_owned()),
        ("io.kubernetes.pod.uid".to_owned(), format!("uid-{pod}")),
        ("io.kubernetes.container.name".to_owned(), name.to_owned()),
    ]);
    Container {
        id: id.to_owned(),
        metadata: Some(ContainerMetadata { name: name.to_owned() }),
        labels,
    }
}

/// A vramd on the fake NVML driver (built once, installed in `dir` with
/// `scenario`), sampling fast, polling `kubelet` and `runtime` every second;
/// `extra` adds environment. Waits until it is ready.
pub fn start_on_fake_driver(
    dir: &Path,
    scenario: &serde_json::Value,
    kubelet: &FakeApi,
    runtime: &FakeApi,
    extra: &[(&str, &str)],
) -> (crate::support::Process, std::net::SocketAddr) {
    use nvidia_ml_fake::harness;
    let built = harness::build_fake_library(false).unwrap_or_else(|error| panic!("{error}"));
    let library = harness::install_as_libnvidia(dir, &built);
    let scenario = harness::write_scenario(dir, scenario);
    let mut env = vec![
        ("VRAMD_NVML__LIBRARY_PATH", library.to_str().unwrap()),
        (harness::SCENARIO_ENV, scenario.to_str().unwrap()),
        ("VRAMD_SAMPLER__FAST_INTERVAL", "100ms"),
        ("VRAMD_SAMPLER__SLOW_INTERVAL", "200ms"),
        ("VRAMD_KUBERNETES__ENABLED", "true"),
        ("VRAMD_KUBERNETES__POD_RESOURCES_SOCKET", kubelet.socket.to_str().unwrap()),
        ("VRAMD_KUBERNETES__RUNTIME_SOCKET", runtime.socket.to_str().unwrap()),
        ("VRAMD_KUBERNETES__REFRESH_INTERVAL", "1s"),
        ("VRAMD_KUBERNETES__CALL_TIMEOUT", "500ms"),
    ];
    env.extend_from_slice(extra);
    let mut daemon = crate::support::Process::spawn(&crate::support::SERVE, &env);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    (daemon, addr)
}

/// A real `sleep` process in a cgroup shaped as containerd's systemd
/// driver makes it for a best-effort pod
/// (`kubepods.slice/…/kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope`),
/// so the daemon reads its container ID from `/proc/PID/cgroup` as on a
/// node. Killed, and its cgroups removed, on drop.
pub struct ContainerProcess {
    pub pid: u32,
    /// 64 lowercase hex digits, unique to this test process and call.
    pub container_id: String,
    child: std::process::Child,
    cgroups: Vec<PathBuf>,
}

impl ContainerProcess {
    /// `None` where no cgroup hierarchy can be written (not root, or a
    /// read-only /sys/fs/cgroup): the caller skips, saying so.
    pub fn start(pod_uid: &str) -> Option<Self> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        let container_id = format!("{:08x}{:056x}", std::process::id(), serial);
        let pod = format!("kubepods-besteffort-pod{}.slice", pod_uid.replace('-', "_"));
        let scope = format!("cri-containerd-{container_id}.scope");
        let mut child = std::process::Command::new("sleep").arg("600").spawn().ok()?;
        // cgroup v1 with a pids hierarchy, else a cgroup v2 root.
        for root in ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"] {
            let slices = Path::new(root).join("kubepods.slice/kubepods-besteffort.slice");
            let cgroups = vec![slices.join(&pod).join(&scope), slices.join(&pod)];
            let moved = std::fs::create_dir_all(&cgroups[0]).is_ok()
                && std::fs::write(cgroups[0].join("cgroup.procs"), child.id().to_string()).is_ok();
            if moved {
                return Some(Self { pid: child.id(), container_id, child, cgroups });
            }
            for cgroup in &cgroups {
                let _ = std::fs::remove_dir(cgroup);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

impl Drop for ContainerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A cgroup is removable once its last process is reaped; the shared
        // kubepods slices may hold another test's pods, so they stay.
        for cgroup in &self.cgroups {
            let _ = std::fs::remove_dir(cgroup);
        }
    }
}

/// The `vramd_process_info` line of `pid`, if the scrape has one.
pub fn process_info(text: &str, pid: u32) -> Option<String> {
    let pid = format!("pid=\"{pid}\"");
    text.lines()
        .find(|line| line.starts_with("vramd_process_info{") && line.contains(&pid))
        .map(str::to_owned)
}

/// The value of the sample whose line starts with `series` (name and
/// labels, up to the closing brace).
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// The fake NVML scenario of the MIG tests: GPU 0 ([`GPU0`]) whole, GPU 1
/// ([`GPU1`]) in MIG mode with one `1g.10gb` device ([`MIG`]) of GPU
/// instance 9.
pub const GPU0: &str = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20";
pub const GPU1: &str = "GPU-1b2c3d4e-1111-4d7b-9a1e-3b5c7d9e1f21";
pub const MIG: &str = "MIG-5c2a1d3e-0000-5f6a-8b9c-0d1e2f3a4b5c";

pub fn gpu_and_mig_scenario() -> serde_json::Value {
    let gib: u64 = 1 << 30;
    let memory = serde_json::json!({ "total_bytes": 80 * gib, "reserved_bytes": gib / 2, "used_bytes": gib });
    serde_json::json!({
        "devices": [
            { "uuid": GPU0, "name": "NVIDIA H100 80GB HBM3", "memory": memory },
            {
                "uuid": GPU1,
                "name": "NVIDIA H100 80GB HBM3",
                "memory": memory,
                "mig": {
                    "enabled": true,
                    "devices": [ {
                        "uuid": MIG,
                        "gpu_instance_id": 9,
                        "profile": "1g.10gb",
                        "memory": { "total_bytes": 10 * gib, "used_bytes": gib },
                    } ],
                },
            },
        ],
    })
}
