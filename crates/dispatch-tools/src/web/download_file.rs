//! `download_file`: stream a URL into a file inside the work directory (seed §9).
//!
//! The body goes to a temporary file beside the target and is renamed into place only once it
//! is complete, so the target is never half-written; the target's earlier state is recorded in
//! the file history first (as edit_file does), so restore_file can undo the download.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use dispatch_store::{FileAction, FileHistory};
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use url::Url;

use super::client::{FetchError, Outgoing, WebClient, read_capped};
use super::guard::NetPolicy;
use super::http_request::excerpt;
use crate::files::beneath::Target;
use crate::files::confine::Confinement;
use crate::files::write::{MAX_SNAPSHOT_FILE_BYTES, Recorder, blocking, human_bytes, io_error};
use crate::{BuiltinTool, Stores};

/// Largest download by default.
pub const DEFAULT_MAX_BYTES: u64 = 1024 * 1024 * 1024;
const DEFAULT_TIMEOUT_SECS: u64 = 120;
const MAX_TIMEOUT_SECS: u64 = 600;
/// Body bytes quoted when the server answers with an error status.
const ERROR_BODY: usize = 8 * 1024;
/// Time between two progress events while bytes arrive.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Download a URL to a file.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadFileArgs {
    /// Absolute http:// or https:// URL.
    url: String,
    /// Where to save it, relative to the work directory; missing directories are created.
    path: String,
    /// Seconds before giving up (default 120, max 600; 0 means the default).
    #[serde(default)]
    #[schemars(range(min = 0, max = 600))]
    timeout: Option<u64>,
    /// Replace the file if it exists (its old content is kept for restore_file).
    #[serde(default)]
    overwrite: bool,
}

/// The `download_file` tool.
pub struct DownloadFile {
    client: Result<WebClient, String>,
    max_bytes: u64,
    /// Where the target's earlier state is recorded, so restore_file can undo the download.
    history: Option<Arc<dyn FileHistory>>,
}

impl DownloadFile {
    /// A download_file that reaches public hosts and those `policy` allow-lists, up to 1 GiB.
    pub fn new(policy: Arc<NetPolicy>, stores: &Stores) -> Self {
        DownloadFile {
            client: WebClient::new(policy),
            max_bytes: DEFAULT_MAX_BYTES,
            history: stores.file_history.clone(),
        }
    }

    /// The same tool with another size cap.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }
}

#[async_trait]
impl BuiltinTool for DownloadFile {
    const NAME: &'static str = "download_file";
    const DESCRIPTION: &'static str = "Download a public http(s) URL into a file in the work directory (streamed; up to 1 GiB). Refuses to replace an existing file unless overwrite=true; a replaced file can be restored with restore_file. A non-2xx answer is an error quoting the start of the body. Asks the user first. Private and local addresses are refused unless the user allow-listed the host.";
    type Args = DownloadFileArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.concurrent()
            .gate(Gate::Ask)
            .effect(Effect::Mutates)
            .timeout(Duration::from_secs(MAX_TIMEOUT_SECS + 10))
    }

    fn subject(&self, args: &Value, workdir: &std::path::Path) -> Option<Subject> {
        use crate::subjects::{resolved, text};
        let mut subject =
            Subject::new(Access::Changes).paths(resolved(workdir, text(args, "path")));
        subject.urls.extend(text(args, "url").map(str::to_string));
        Some(subject)
    }

    async fn run(&self, cx: ToolContext, args: DownloadFileArgs) -> Result<ToolOutput, ToolError> {
        let client = self
            .client
            .as_ref()
            .map_err(|e| ToolError::failed(e.clone()))?;
        let url = Url::parse(args.url.trim()).map_err(|e| {
            ToolError::failed(format!(
                "url {:?} is not a valid absolute URL ({e}); write it in full, e.g. https://example.com/file.zip",
                args.url
            ))
        })?;
        let timeout = Duration::from_secs(match args.timeout {
            None | Some(0) => DEFAULT_TIMEOUT_SECS,
            Some(t) => t.min(MAX_TIMEOUT_SECS),
        });
        let recorder = Recorder::for_call(self.history.as_ref(), &cx, Self::NAME)?;
        let confine = Confinement::for_call(&cx)?;
        if args.path.ends_with('/') {
            return Err(ToolError::failed(format!(
                "path {:?} ends with `/`, so it names a directory; give the file's path, e.g. {}file.bin",
                args.path, args.path
            )));
        }
        let path = confine.resolve(&args.path)?;
        let shown = confine.display(&path).into_owned();
        let (file, shown_owned) = (path.clone(), shown.clone());
        let exists = blocking(move || match std::fs::symlink_metadata(&file) {
            Ok(meta) => {
                crate::files::write::check_regular(&meta, &shown_owned)?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error("inspect", &shown_owned, &e)),
        })
        .await?;
        if exists && !args.overwrite {
            return Err(ToolError::failed(format!(
                "{shown} already exists; pass overwrite=true to replace it (its content is kept for restore_file), or choose another path"
            )));
        }
        // The directory is held open beneath the work directory from here on: the temporary
        // file, the old content and the final rename all go through it, never through a link.
        let tag = format!(
            "download-{}",
            &blake3::hash(format!("{}/{}", cx.run_id, cx.call_id).as_bytes()).to_hex()[..12]
        );
        let (file, shown_owned, confined) = (path.clone(), shown.clone(), confine.clone());
        let (target, temp, out) = blocking(move || {
            let target = Target::open(&confined, &file, &shown_owned, true)?;
            let (out, name) = target
                .create_temp(&tag)
                .map_err(|e| io_error("create a temporary file for", &shown_owned, &e))?;
            let temp = TempFile {
                target: target.clone(),
                name,
                moved: false,
            };
            Ok((target, temp, out))
        })
        .await?;
        let out = tokio::fs::File::from_std(out);
        let download = self.stream(&cx, client, &url, out, &shown);
        let got = tokio::select! {
            r = tokio::time::timeout(timeout, download) => match r {
                Ok(r) => r?,
                Err(_) => return Err(ToolError::failed(format!(
                    "timed out after {} s downloading {url} (timeout={}); nothing was saved. Retry with a larger timeout (max {MAX_TIMEOUT_SECS} s)",
                    timeout.as_secs(), timeout.as_secs()
                ))),
            },
            _ = cx.cancel.cancelled() => return Err(ToolError::failed("the download was cancelled; nothing was saved")),
        };

        // Record the target's state, then move the finished file into place.
        let (dir, shown_owned) = (target.clone(), shown.clone());
        let old = blocking(move || dir.read_existing(&shown_owned, MAX_SNAPSHOT_FILE_BYTES))
            .await?
            .map(|e| e.bytes);
        let action = if old.is_some() {
            FileAction::Modify
        } else {
            FileAction::Create
        };
        let replaced = old.as_ref().map(|b| b.len() as u64);
        let version = recorder.record(&path, &shown, action, old, None).await?;
        let (from, shown_owned) = (temp.name.clone(), shown.clone());
        blocking(move || {
            target.replace_with(&from).map_err(|e| {
                ToolError::failed(format!(
                    "{} (version {version} was recorded anyway; restoring it is harmless)",
                    io_error("move the download into", &shown_owned, &e)
                ))
            })
        })
        .await?;
        temp.disarm();
        let what = match replaced {
            Some(old) => format!(
                "replaced the previous {}; undo with restore_file(version={version})",
                human_bytes(old)
            ),
            None => format!("new file; version {version} records that it did not exist"),
        };
        let redirected = match &got.final_url {
            Some(u) => format!(" (redirected to {u})"),
            None => String::new(),
        };
        Ok(ToolOutput::text(format!(
            "downloaded {url}{redirected} to {shown}: {}, {}; {what}",
            human_bytes(got.bytes),
            got.content_type.as_deref().unwrap_or("no content-type"),
        ))
        .with_paths(vec![path]))
    }
}

/// What a finished download was.
struct Got {
    bytes: u64,
    content_type: Option<String>,
    final_url: Option<Url>,
}

impl DownloadFile {
    /// Fetch `url` and stream its body into `temp`, with progress events.
    async fn stream(
        &self,
        cx: &ToolContext,
        client: &WebClient,
        url: &Url,
        mut out: tokio::fs::File,
        shown: &str,
    ) -> Result<Got, ToolError> {
        let request = Outgoing {
            method: Method::GET,
            url: url.clone(),
            headers: HeaderMap::new(),
            body: None,
            secret_headers: Vec::new(),
        };
        let mut fetched = client.send(request).await.map_err(|e| match e {
            FetchError::Refused(r) => ToolError::failed(r.message),
            FetchError::Failed(m) => ToolError::failed(m),
        })?;
        let status = fetched.response.status();
        if !status.is_success() {
            let body = read_capped(&mut fetched.response, ERROR_BODY, |_| {})
                .await
                .map(|b| excerpt(&b.bytes, ERROR_BODY, b.truncated))
                .unwrap_or_else(|e| e);
            let message = format!(
                "HTTP {status} from {}; nothing was saved. Response body: {body}",
                fetched.url
            );
            return Err(if matches!(status.as_u16(), 401 | 403) {
                ToolError::Credential { key: None, message }
            } else {
                ToolError::failed(message)
            });
        }
        let total = fetched.response.content_length();
        if let Some(total) = total.filter(|t| *t > self.max_bytes) {
            return Err(ToolError::failed(format!(
                "{url} announces {}, over the download limit of {}; nothing was saved",
                human_bytes(total),
                human_bytes(self.max_bytes)
            )));
        }
        let content_type = fetched
            .response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut written: u64 = 0;
        let mut last_report = Instant::now();
        let describe_total = |n: Option<u64>| match n {
            Some(t) => format!(" of {t}"),
            None => String::new(),
        };
        while let Some(chunk) = fetched.response.chunk().await.map_err(|e| {
            ToolError::failed(format!(
                "the download of {url} broke off after {written} bytes: {}; nothing was saved",
                super::client::error_chain(&e)
            ))
        })? {
            written += chunk.len() as u64;
            if written > self.max_bytes {
                return Err(ToolError::failed(format!(
                    "{url} sent more than the download limit of {}; nothing was saved",
                    human_bytes(self.max_bytes)
                )));
            }
            out.write_all(&chunk)
                .await
                .map_err(|e| io_error("write", shown, &e))?;
            if last_report.elapsed() >= PROGRESS_EVERY {
                last_report = Instant::now();
                cx.progress.emit(format!(
                    "downloaded {written}{} bytes\n",
                    describe_total(total)
                ));
            }
        }
        out.flush()
            .await
            .map_err(|e| io_error("write", shown, &e))?;
        out.sync_all()
            .await
            .map_err(|e| io_error("flush", shown, &e))?;
        cx.progress.emit(format!(
            "downloaded {written}{} bytes\n",
            describe_total(total)
        ));
        Ok(Got {
            bytes: written,
            content_type,
            final_url: (!fetched.redirects.is_empty()).then_some(fetched.url),
        })
    }
}

/// A temporary download beside the target, removed unless it was moved into place.
struct TempFile {
    target: Target,
    name: std::ffi::OsString,
    moved: bool,
}

impl TempFile {
    fn disarm(mut self) {
        self.moved = true;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.moved {
            self.target.remove_temp(&self.name);
        }
    }
}

#[cfg(test)]
#[path = "download_file_tests.rs"]
mod tests;
