//! One gRPC call over a unix socket: connect, ask, decode, all under one
//! deadline.
//!
//! Owns: the tonic channel built on a tokio `UnixStream` (no TCP, no TLS)
//! and the typed [`CallError`]. A fresh connection per call: a refresh is
//! every few seconds at most, and a kubelet or runtime that restarted is
//! then simply reached again. Depends on `proto` only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Endpoint, Uri};

use super::access::Refusal;
use super::proto;

/// Why one call produced no answer; its variant name, lowercase, is the
/// `kind` label of `vramd_kubernetes_errors_total`.
#[derive(Debug, thiserror::Error, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum CallError {
    /// The socket file does not exist: not a Kubernetes node, or the mount
    /// is missing. Logged once, not retried loudly.
    #[error("socket {path} does not exist")]
    Absent { path: PathBuf },
    #[error("connecting to {path}: {reason}")]
    Connect { path: PathBuf, reason: String },
    /// The socket's permissions refuse vramd's user (EACCES): the text says
    /// which setting to change.
    #[error("connecting to {path}: permission denied ({refusal})")]
    Denied { path: PathBuf, refusal: Box<DeniedBecause> },
    #[error("{method} on {path} did not answer within {deadline:?}")]
    Timeout { path: PathBuf, method: &'static str, deadline: Duration },
    /// A gRPC status, or an answer that is not the expected message.
    #[error("{method} on {path}: {status}")]
    Status { path: PathBuf, method: &'static str, status: Box<tonic::Status> },
}

impl CallError {
    /// Whether the server does not offer the method (an older kubelet, or
    /// one with the method's feature gate off): asking again cannot help.
    pub fn is_unimplemented(&self) -> bool {
        matches!(self, Self::Status { status, .. } if status.code() == tonic::Code::Unimplemented)
    }
}

/// What was learnt about a refused connect: the socket's ownership and
/// vramd's identity with the advice, or why they could not be read.
#[derive(Debug)]
pub enum DeniedBecause {
    Known(Refusal),
    Unknown,
}

impl std::fmt::Display for DeniedBecause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Known(refusal) => refusal.fmt(f),
            Self::Unknown => f.write_str(
                "the socket could not be inspected; run vramd as uid 0 with every capability \
                 dropped, or in a group that may write the socket (docs/deploy.md)",
            ),
        }
    }
}

/// Asks the kubelet for every pod's resources.
pub async fn list_pod_resources(
    socket: &Path,
    deadline: Duration,
    max_message_bytes: usize,
) -> Result<proto::ListPodResourcesResponse, CallError> {
    call(
        socket,
        proto::POD_RESOURCES_LIST,
        proto::ListPodResourcesRequest {},
        deadline,
        max_message_bytes,
    )
    .await
}

/// Asks the kubelet for every device it could allocate.
pub async fn get_allocatable_resources(
    socket: &Path,
    deadline: Duration,
    max_message_bytes: usize,
) -> Result<proto::AllocatableResourcesResponse, CallError> {
    call(
        socket,
        proto::POD_RESOURCES_GET_ALLOCATABLE,
        proto::AllocatableResourcesRequest {},
        deadline,
        max_message_bytes,
    )
    .await
}

/// Asks the container runtime for every container.
pub async fn list_containers(
    socket: &Path,
    deadline: Duration,
    max_message_bytes: usize,
) -> Result<proto::ListContainersResponse, CallError> {
    call(
        socket,
        proto::RUNTIME_LIST_CONTAINERS,
        proto::ListContainersRequest {},
        deadline,
        max_message_bytes,
    )
    .await
}

async fn call<Req, Resp>(
    socket: &Path,
    method: &'static str,
    request: Req,
    deadline: Duration,
    max_message_bytes: usize,
) -> Result<Resp, CallError>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let work = async {
        // Checked first so a host without the socket is one quiet fact, not
        // a connect error (the caller logs it once).
        // A stat is file I/O: on a blocking thread, inside the deadline.
        let probe = socket.to_owned();
        let connect = |reason| CallError::Connect { path: socket.to_owned(), reason };
        match tokio::task::spawn_blocking(move || probe.try_exists()).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => return Err(CallError::Absent { path: socket.to_owned() }),
            Ok(Err(error)) => return Err(connect(error.to_string())),
            Err(error) => return Err(connect(error.to_string())),
        }
        let path = socket.to_owned();
        // The URI is never dialled: the connector below ignores it.
        let channel = Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
            }))
            .await;
        let channel = match channel {
            Ok(channel) => channel,
            Err(error) => {
                let denied = is_permission_denied(&error);
                return Err(connect_failed(socket, denied, error_chain(&error)).await);
            }
        };
        let mut grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes);
        let status = |status| CallError::Status {
            path: socket.to_owned(),
            method,
            status: Box::new(status),
        };
        if let Err(error) = grpc.ready().await {
            let denied = is_permission_denied(&error);
            return Err(connect_failed(socket, denied, error_chain(&error)).await);
        }
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        grpc.unary(tonic::Request::new(request), PathAndQuery::from_static(method), codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(status)
    };
    tokio::time::timeout(deadline, work).await.unwrap_or(Err(CallError::Timeout {
        path: socket.to_owned(),
        method,
        deadline,
    }))
}

/// A failed connect as a [`CallError`]: "permission denied" (`denied`, from
/// [`is_permission_denied`]) is told apart,
/// with the socket's ownership and the setting to change (read on a
/// blocking thread, inside the call's deadline).
async fn connect_failed(socket: &Path, denied: bool, reason: String) -> CallError {
    if !denied {
        return CallError::Connect { path: socket.to_owned(), reason };
    }
    let probe = socket.to_owned();
    let refusal = tokio::task::spawn_blocking(move || Refusal::inspect(&probe)).await;
    let because = match refusal {
        Ok(Some(refusal)) => DeniedBecause::Known(refusal),
        _ => DeniedBecause::Unknown,
    };
    CallError::Denied { path: socket.to_owned(), refusal: Box::new(because) }
}

/// Whether an I/O error with `EACCES` is among the error's sources.
fn is_permission_denied(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(cause) = next {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
        {
            return true;
        }
        next = cause.source();
    }
    false
}

/// The error and its sources on one line (hyper's errors say little alone).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
