//! `PUT` and `GET /api/v1/oom-events/{id}/snapshot`: the allocator snapshot
//! a workload dumped at an OOM, kept in `ingest.snapshot_dir` for the memory
//! viewer (pytorch.org/memory_viz).
//!
//! The body is streamed to disk, never held whole: chunks are written on
//! blocking threads, each with `server.request_timeout` as its deadline, so
//! a slow disk holds no async worker. Reading back is chunked the same way.
//! What the directory holds and evicts is `ingest::snapshot`'s business.

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde::Serialize;

use crate::ingest::{SnapshotError, SnapshotStore, Upload};

use super::error::{ApiError, ErrorBody};
use super::reports::{announced_length, refusal, too_many_requests};
use super::{AppState, PathId, oom};

/// Written and read in pieces of this size: large enough that the blocking
/// hand-offs cost little next to the disk, small enough to hold per request.
const CHUNK: usize = 1 << 20;

/// An allocator snapshot as the reporter's `_dump_snapshot` wrote it (a
/// pickle the memory viewer opens), bytes as they are.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code, reason = "only describes the body in the OpenAPI document")]
pub struct SnapshotBytes(Vec<u8>);

/// The answer to a stored snapshot.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SnapshotStored {
    /// Always `stored`.
    #[schema(example = "stored")]
    pub status: &'static str,
    #[schema(example = 7)]
    pub id: u64,
    /// Bytes kept.
    pub bytes: u64,
    /// Where the memory viewer can fetch it.
    #[schema(example = "/api/v1/oom-events/7/snapshot")]
    pub url: String,
    /// Events whose snapshots were evicted to stay within
    /// `ingest.max_snapshot_bytes`, oldest upload first.
    pub evicted: Vec<u64>,
}

/// Whether `request` uploads a snapshot: the one request that carries a
/// body too large for `server.request_timeout`.
pub(super) fn is_upload(request: &Request) -> bool {
    let path = request.uri().path();
    request.method() == axum::http::Method::PUT
        && path.starts_with("/api/v1/oom-events/")
        && path.ends_with("/snapshot")
}

/// Where event `id`'s snapshot is served.
pub(super) fn url(id: u64) -> String {
    format!("/api/v1/oom-events/{id}/snapshot")
}

fn disabled() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "snapshots_disabled",
        "snapshot uploads are off; set ingest.snapshot_dir to keep them",
    )
}

fn no_snapshot(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_snapshot",
        format!("no snapshot is held for OOM event `{id}` (never uploaded, or evicted)"),
    )
}

fn refused(error: SnapshotError) -> ApiError {
    match error {
        SnapshotError::TooLarge { .. } | SnapshotError::Crowded { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "snapshot_too_large", error.to_string())
        }
        SnapshotError::Empty { .. } => ApiError::bad_request("bad_snapshot", error.to_string()),
        SnapshotError::Directory { .. } | SnapshotError::Write { .. } => {
            tracing::warn!(error = %error, "cannot store an OOM snapshot");
            ApiError::internal(error)
        }
    }
}

/// Runs `work` on a blocking thread, giving up waiting after `deadline`
/// (the thread finishes on its own; an unfinished upload then removes its
/// temporary file when dropped there).
async fn blocking<T: Send + 'static>(
    deadline: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::time::timeout(deadline, tokio::task::spawn_blocking(work)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(ApiError::internal(error)),
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_timeout",
            "the snapshot directory did not answer within server.request_timeout",
        )),
    }
}

/// An upload in progress. However the request ends (refused, cut off by
/// the client or the request timeout), an unfinished upload is dropped on
/// a blocking thread, where it removes its temporary file.
struct Pending(Option<Upload>);

impl Pending {
    async fn write(&mut self, deadline: Duration, chunk: Vec<u8>) -> Result<(), ApiError> {
        let Some(mut upload) = self.0.take() else { return Ok(()) };
        // On an error the upload is dropped on that thread, file and all.
        let upload = blocking(deadline, move || upload.write(&chunk).map(|()| upload))
            .await?
            .map_err(refused)?;
        self.0 = Some(upload);
        Ok(())
    }

    /// Removes the temporary file before the answer goes out, so a refused
    /// upload has left nothing behind by then.
    async fn discard(mut self, deadline: Duration) {
        if let Some(upload) = self.0.take() {
            // Past the deadline the thread still drops it; nothing to add.
            let _gone = blocking(deadline, move || drop(upload)).await;
        }
    }

    async fn finish(mut self, deadline: Duration) -> Result<(u64, Vec<u64>), ApiError> {
        let upload = self.0.take().ok_or_else(|| ApiError::internal("upload already ended"))?;
        blocking(deadline, move || upload.finish()).await?.map_err(refused)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(upload) = self.0.take() {
            drop(tokio::task::spawn_blocking(move || drop(upload)));
        }
    }
}

#[utoipa::path(
    put,
    path = "/api/v1/oom-events/{id}/snapshot",
    tag = "allocator-reports",
    operation_id = "put_oom_snapshot",
    summary = "Upload the allocator snapshot of an OOM event",
    description = "The file `torch.cuda.memory._dump_snapshot` wrote at the OOM, sent as it is. \
Kept only when `ingest.snapshot_dir` is set, under a name made from the event id; an upload \
replaces the event's earlier one. Beyond `ingest.max_snapshot_bytes` the oldest uploads are \
evicted. Written to a temporary file and renamed, so a reader never sees part of one. Same \
writers (loopback or token) and rate (`ingest.rate_limit`, counted for the event's reporter) \
as the event itself.",
    params(("id" = String, Path, description = "The event's id", example = "7")),
    request_body(content = SnapshotBytes, content_type = "application/octet-stream",
        description = "The snapshot file, at most `ingest.max_snapshot_upload` bytes"),
    security((), ("bearer" = [])),
    responses(
        (status = 201, description = "Stored", body = SnapshotStored,
            example = json!({"status": "stored", "id": 7, "bytes": 48213377, "url": "/api/v1/oom-events/7/snapshot", "evicted": [3]})),
        (status = 400, description = "An empty body, or one that broke off (`bad_snapshot`)",
            body = ErrorBody,
            example = json!({"code": "bad_snapshot", "message": "the snapshot of OOM event 7 is empty"})),
        (status = 401, description = "From another host with `ingest.token_file` set: no \
bearer token (`missing_token`) or the wrong one (`bad_token`)", body = ErrorBody,
            example = json!({"code": "missing_token", "message": "writes from other hosts need Authorization: Bearer <token> (ingest.token_file)"})),
        (status = 403, description = "From another host without `ingest.token_file` \
(`remote_writes_disabled`)", body = ErrorBody,
            example = json!({"code": "remote_writes_disabled", "message": "only loopback may write allocator reports; set ingest.token_file to accept others"})),
        (status = 404, description = "No event with that id is held (`unknown_oom_event`), or \
uploads are off (`snapshots_disabled`)", body = ErrorBody,
            example = json!({"code": "snapshots_disabled", "message": "snapshot uploads are off; set ingest.snapshot_dir to keep them"})),
        (status = 413, description = "Larger than `ingest.max_snapshot_upload` \
(`snapshot_too_large`)", body = ErrorBody,
            example = json!({"code": "snapshot_too_large", "message": "the snapshot of OOM event 7 is larger than 1073741824 bytes (ingest.max_snapshot_upload, at most ingest.max_snapshot_bytes)"})),
        (status = 429, description = "More than `ingest.rate_limit` writes a second from the \
event's reporter (`rate_limited`)", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before sending again")),
            example = json!({"code": "rate_limited", "message": "more than 10 OOM events per second from this reporter (ingest.rate_limit)"})),
    )
)]
pub async fn put(
    State(state): State<AppState>,
    PathId(id): PathId,
    request: Request,
) -> Result<Response, ApiError> {
    if let Some(refused) = refusal(&request, &state.ingest) {
        return Ok(refused);
    }
    let snapshots = state.ingest.snapshots.clone().ok_or_else(disabled)?;
    let (_, event) = oom::find(&state, &id)?;
    if let Err(refusal) = state.ingest.oom.admit(&event, tokio::time::Instant::now()) {
        return Ok(too_many_requests(&refusal));
    }
    let max = snapshots.max_upload_bytes();
    let too_large = || refused(SnapshotError::TooLarge { id: event.id, max });
    if announced_length(request.headers()).is_some_and(|length| length > max) {
        return Err(too_large());
    }
    let deadline = state.limits.request_timeout;
    let event_id = event.id;
    let upload = blocking(deadline, move || snapshots.begin(event_id)).await?.map_err(refused)?;
    let mut upload = Pending(Some(upload));
    let mut body = request.into_body();
    let mut pending: Vec<u8> = Vec::new();
    let mut received: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            ApiError::bad_request("bad_snapshot", format!("the upload broke off: {error}"))
        })?;
        let Ok(data) = frame.into_data() else { continue };
        received = received.saturating_add(data.len() as u64);
        // Refused before the bytes are buffered or written: a client that
        // announced no length cannot make vramd hold or write more.
        if received > max {
            upload.discard(deadline).await;
            return Err(too_large());
        }
        pending.extend_from_slice(&data);
        if pending.len() >= CHUNK {
            upload.write(deadline, std::mem::take(&mut pending)).await?;
        }
    }
    if !pending.is_empty() {
        upload.write(deadline, pending).await?;
    }
    let (bytes, evicted) = upload.finish(deadline).await?;
    Ok((
        StatusCode::CREATED,
        Json(SnapshotStored { status: "stored", id: event_id, bytes, url: url(event_id), evicted }),
    )
        .into_response())
}

#[utoipa::path(
    get,
    path = "/api/v1/oom-events/{id}/snapshot",
    tag = "allocator-reports",
    operation_id = "get_oom_snapshot",
    summary = "The allocator snapshot of an OOM event",
    description = "The file as uploaded, for the memory viewer at pytorch.org/memory_viz.",
    params(("id" = String, Path, description = "The event's id", example = "7")),
    responses(
        (status = 200, description = "The snapshot", body = SnapshotBytes,
            content_type = "application/octet-stream"),
        (status = 404, description = "None held for that id: never uploaded or evicted \
(`no_snapshot`), or uploads are off (`snapshots_disabled`)", body = ErrorBody,
            example = json!({"code": "no_snapshot", "message": "no snapshot is held for OOM event `7` (never uploaded, or evicted)"})),
    )
)]
pub async fn get(State(state): State<AppState>, PathId(id): PathId) -> Result<Response, ApiError> {
    let snapshots = state.ingest.snapshots.clone().ok_or_else(disabled)?;
    let wanted = super::oom::event_id(&id).ok_or_else(|| no_snapshot(&id))?;
    snapshots.held(wanted).ok_or_else(|| no_snapshot(&id))?;
    let deadline = state.limits.request_timeout;
    let path = snapshots.path(wanted);
    // Evicted between the look-up and the open: the same 404. Once open,
    // an eviction or a replacing upload no longer matters: this file lives
    // until it is closed, and its own length is what is served.
    let (file, length) = blocking(deadline, move || {
        let file = crate::ingest::snapshot::open_held(&path)?;
        let length = file.metadata()?.len();
        Ok::<_, std::io::Error>((file, length))
    })
    .await?
    .map_err(|_| no_snapshot(&id))?;
    let chunks = futures_util::stream::unfold((Arc::new(file), 0_u64), move |(file, offset)| {
        read_chunk(file, offset, length, deadline)
    });
    let disposition = format!("attachment; filename=\"vramd-oom-{wanted}.pickle\"");
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, length.to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        super::streamed_body(chunks),
    )
        .into_response())
}

type Chunk = Result<Bytes, std::io::Error>;

/// The piece of `file` at `offset`, read on a blocking thread; an error
/// ends the stream (the client sees a short body against its length).
async fn read_chunk(
    file: Arc<std::fs::File>,
    offset: u64,
    length: u64,
    deadline: Duration,
) -> Option<(Chunk, (Arc<std::fs::File>, u64))> {
    if offset >= length {
        return None;
    }
    let want = usize::try_from(length - offset).map_or(CHUNK, |left| left.min(CHUNK));
    let reader = Arc::clone(&file);
    let read = blocking(deadline, move || {
        let mut buffer = vec![0; want];
        let got = reader.read_at(&mut buffer, offset)?;
        buffer.truncate(got);
        Ok::<_, std::io::Error>(buffer)
    })
    .await;
    match read {
        Ok(Ok(buffer)) if !buffer.is_empty() => {
            let next = offset + buffer.len() as u64;
            Some((Ok(Bytes::from(buffer)), (file, next)))
        }
        _ => Some((Err(std::io::Error::other("the snapshot could not be read")), (file, length))),
    }
}

/// Whether event `id` has a snapshot held, and its URL when so.
pub(super) fn held_url(state: &AppState, id: u64) -> Option<String> {
    let snapshots: &SnapshotStore = state.ingest.snapshots.as_deref()?;
    snapshots.held(id).map(|_| url(id))
}

#[cfg(test)]
#[path = "oom_snapshot_tests.rs"]
mod tests;
