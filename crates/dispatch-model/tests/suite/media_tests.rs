//! generate_image and generate_audio run through the engine against a scripted OpenAI server on
//! 127.0.0.1: the bytes saved are the bytes served (generations in base64, edits sent as
//! multipart with the reference file's bytes, speech), a declined call asks nothing of the
//! server, save_to outside the work directory is refused, a 429 is waited out, a server error
//! is a clear failure, and the key shows up nowhere but in the request's header.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use dispatch_engine::{
    ConfirmReply, ConfirmRequest, Confirmer, Engine, EngineConfig, Provider, RawCall, RoundOutcome,
    RoundRequest, SlotResult, Status,
};
use dispatch_model::{ModelConfig, OpenAiMedia, ProviderKind, RetryPolicy};
use dispatch_store::Store;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::{FakeServer, KEY, Reply};

/// Approves (or declines) every call and keeps the reasons it was shown.
#[derive(Default)]
struct Asked {
    approve: bool,
    why: Mutex<Vec<String>>,
}

#[async_trait]
impl Confirmer for Asked {
    async fn confirm(&self, request: &ConfirmRequest) -> ConfirmReply {
        self.why.lock().unwrap().push(request.why.clone());
        ConfirmReply {
            approve: self.approve,
            reason: (!self.approve).then(|| "not now".to_string()),
            ..ConfirmReply::default()
        }
    }
}

struct Fixture {
    engine: Engine,
    asked: Arc<Asked>,
    workdir: tempfile::TempDir,
    data_dir: tempfile::TempDir,
    store_file: PathBuf,
}

impl Fixture {
    /// An engine over a SQLite store whose media tools call `server` with the model entries
    /// `img` (gpt-image-1) and `tts`, the key a stored secret.
    async fn new(server: &FakeServer, approve: bool) -> Fixture {
        let data_dir = tempfile::tempdir().unwrap();
        let store_file = data_dir.path().join("store.db");
        let store: Arc<dyn Store> =
            dispatch_store::open(&format!("sqlite:{}", store_file.display())).unwrap();
        store.secret_set("MEDIA_KEY", KEY).await.unwrap();
        let models: Vec<(String, ModelConfig)> =
            [("img", "gpt-image-1"), ("tts", "gpt-4o-mini-tts")]
                .into_iter()
                .map(|(name, model)| {
                    let mut config = ModelConfig::new(ProviderKind::OpenAi, model);
                    config.base_url = Some(server.base_url.clone());
                    config.key = Some("{{secret:MEDIA_KEY}}".into());
                    (name.to_string(), config)
                })
                .collect();
        let media = OpenAiMedia::new(store.clone(), &models, Some("img"), Some("tts"))
            .with_retry_policy(RetryPolicy {
                max_attempts: 2,
                base_wait: Duration::from_millis(10),
                max_wait: Duration::from_secs(60),
            });
        let tools = dispatch_tools::ToolsConfig {
            media: Some(Arc::new(media)),
            ..Default::default()
        };
        let registry =
            dispatch_tools::builtin_registry_with(&tools, &dispatch_tools::Stores::all(&store))
                .unwrap();
        let workdir = tempfile::tempdir().unwrap();
        let mut config = EngineConfig::new(workdir.path().canonicalize().unwrap());
        config.data_dir = Some(data_dir.path().canonicalize().unwrap().join("files"));
        let asked = Arc::new(Asked {
            approve,
            ..Asked::default()
        });
        // No `with_secrets`: the engine redacts nothing here, so a leaked key would show.
        let engine = Engine::new(registry, store, asked.clone(), config).unwrap();
        Fixture {
            engine,
            asked,
            workdir,
            data_dir,
            store_file,
        }
    }

    fn root(&self) -> PathBuf {
        self.workdir.path().canonicalize().unwrap()
    }

    /// `tool` called with `args` in run `run` (its schema fetched first, in a run of its own).
    async fn call(&self, run: &str, tool: &str, args: Value) -> (SlotResult, RoundOutcome) {
        let select = RawCall::new(
            "sel",
            "find_tools",
            json!({"query": format!("select:{tool}")}).to_string(),
        );
        let marked = self
            .engine
            .round(RoundRequest::new(
                "s1",
                format!("{run}-sel"),
                Provider::OpenAi,
                vec![select],
            ))
            .await
            .unwrap();
        assert_eq!(marked.results[0].status, Status::Ok);
        let call = RawCall::new(
            "c1",
            "run_tool",
            json!({"name": tool, "args": args}).to_string(),
        );
        let out = self
            .engine
            .round(RoundRequest::new("s1", run, Provider::OpenAi, vec![call]))
            .await
            .unwrap();
        (out.results[0].clone(), out)
    }

    fn deliverables(&self) -> PathBuf {
        let files = self.data_dir.path().canonicalize().unwrap().join("files");
        dispatch_engine::shaping::session_dir(&files, "s1").join("deliverables")
    }

    fn asked(&self) -> Vec<String> {
        self.asked.why.lock().unwrap().clone()
    }
}

/// The path after `saved to ` in a result.
fn saved_path(content: &str) -> PathBuf {
    let start = content.find("saved to ").unwrap() + "saved to ".len();
    let rest = &content[start..];
    let end = rest.find([' ', '\n', ';']).unwrap_or(rest.len());
    PathBuf::from(&rest[..end])
}

/// Bytes that start like a PNG, then vary (so that equal bytes mean the same bytes).
fn png(seed: u8) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend((0..5000u32).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    bytes
}

fn b64_answer(bytes: &[u8]) -> Reply {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    Reply::status(
        200,
        &json!({"created": 1, "data": [{"b64_json": b64}]}).to_string(),
    )
}

/// A mono 16-bit WAVE of `samples` samples at 24 kHz.
fn wav(samples: u32) -> Vec<u8> {
    let data = samples * 2;
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(36 + data).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&24_000u32.to_le_bytes());
    out.extend_from_slice(&48_000u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data.to_le_bytes());
    out.extend((0..data).map(|i| (i % 251) as u8));
    out
}

/// The parts of a multipart/form-data body: (name, bytes).
fn parts(content_type: &str, body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let boundary = content_type
        .split_once("boundary=")
        .unwrap()
        .1
        .trim_matches('"');
    let delimiter = format!("--{boundary}").into_bytes();
    let mut out = Vec::new();
    let mut starts = Vec::new();
    let mut at = 0;
    while let Some(found) = body[at..]
        .windows(delimiter.len())
        .position(|w| w == delimiter.as_slice())
    {
        starts.push(at + found);
        at += found + delimiter.len();
    }
    for pair in starts.windows(2) {
        let part = &body[pair[0] + delimiter.len() + 2..pair[1] - 2];
        let split = part.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&part[..split]).to_string();
        let name = head
            .split("name=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        out.push((name.to_string(), part[split + 4..].to_vec()));
    }
    out
}

#[tokio::test]
async fn a_generated_image_is_saved_as_served_and_shown_to_the_model() {
    let image = png(1);
    let server = FakeServer::start(vec![b64_answer(&image)]).await;
    let fx = Fixture::new(&server, true).await;
    let (result, _) = fx
        .call(
            "r1",
            "generate_image",
            json!({"prompt": "A red fox in snow", "size": "1024x1024", "quality": "high"}),
        )
        .await;
    assert_eq!(result.status, Status::Ok, "{}", result.content);
    assert_eq!(
        fx.asked(),
        ["generate_image calls a paid image API (each image costs money)"]
    );
    let path = saved_path(&result.content);
    assert_eq!(path.parent().unwrap(), fx.deliverables());
    assert!(
        path.file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with("-a-red-fox-in-snow.png"),
        "{path:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), image);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        result
            .content
            .contains("generated an image with [models.img] gpt-image-1 (5008 bytes, image/png)"),
        "{}",
        result.content
    );
    assert_eq!(
        result.images,
        [format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&image)
        )]
    );
    let request = server.only_request();
    assert_eq!(request.path, "/v1/images/generations");
    assert_eq!(request.headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(
        request.body,
        json!({"model": "gpt-image-1", "prompt": "A red fox in snow", "n": 1,
               "size": "1024x1024", "quality": "high"})
    );
    // Nothing was written in the work directory.
    assert_eq!(std::fs::read_dir(fx.root()).unwrap().count(), 0);
}

#[tokio::test]
async fn an_edit_uploads_the_reference_file_and_save_to_gets_a_copy() {
    let edited = png(2);
    let server = FakeServer::start(vec![b64_answer(&edited)]).await;
    let fx = Fixture::new(&server, true).await;
    let reference = png(3);
    std::fs::create_dir(fx.root().join("art")).unwrap();
    std::fs::write(fx.root().join("art/fox.png"), &reference).unwrap();
    let (result, out) = fx
        .call(
            "r1",
            "generate_image",
            json!({"prompt": "Make it night", "reference_image_path": "art/fox.png",
                   "save_to": "art/night/fox.png"}),
        )
        .await;
    assert_eq!(result.status, Status::Ok, "{}", result.content);
    assert_eq!(
        fx.asked(),
        [
            "generate_image calls a paid image API and writes the image to art/night/fox.png in the work directory"
        ]
    );
    assert!(
        result.content.ends_with(" and to art/night/fox.png"),
        "{}",
        result.content
    );
    assert_eq!(
        std::fs::read(fx.root().join("art/night/fox.png")).unwrap(),
        edited
    );
    assert_eq!(std::fs::read(saved_path(&result.content)).unwrap(), edited);
    let request = server.only_request();
    assert_eq!(request.path, "/v1/images/edits");
    let content_type = &request.headers["content-type"];
    assert!(
        content_type.starts_with("multipart/form-data; boundary="),
        "{content_type}"
    );
    let parts = parts(content_type, &request.raw);
    let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["model", "prompt", "n", "image"]);
    assert_eq!(parts[1].1, b"Make it night");
    assert_eq!(
        parts[3].1, reference,
        "the reference file's bytes went up as they are"
    );
    assert_eq!(out.results.len(), 1);

    // A second call to the same save_to is refused before anything is sent.
    let (again, _) = fx
        .call(
            "r2",
            "generate_image",
            json!({"prompt": "Again", "save_to": "art/night/fox.png"}),
        )
        .await;
    assert_eq!(again.status, Status::Failed);
    assert!(
        again
            .content
            .contains("save_to art/night/fox.png already exists and is never overwritten"),
        "{}",
        again.content
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_declined_call_sends_nothing_and_saves_nothing() {
    let server = FakeServer::start(vec![
        b64_answer(&png(4)),
        Reply::bytes("audio/wav", &wav(10)),
    ])
    .await;
    let fx = Fixture::new(&server, false).await;
    let (image, _) = fx
        .call(
            "r1",
            "generate_image",
            json!({"prompt": "A cat", "save_to": "cat.png"}),
        )
        .await;
    let (audio, _) = fx
        .call("r2", "generate_audio", json!({"text": "Hello"}))
        .await;
    assert_eq!(
        (image.status, audio.status),
        (Status::Declined, Status::Declined)
    );
    assert_eq!(
        fx.asked(),
        [
            "generate_image calls a paid image API and writes the image to cat.png in the work directory",
            "generate_audio calls a paid speech API (each call costs money)"
        ]
    );
    assert!(server.requests().is_empty());
    assert!(!fx.deliverables().exists());
    assert_eq!(std::fs::read_dir(fx.root()).unwrap().count(), 0);
}

#[tokio::test]
async fn paths_outside_the_work_directory_are_refused_before_any_request() {
    let server = FakeServer::start(vec![]).await;
    let fx = Fixture::new(&server, true).await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("ref.png"), png(5)).unwrap();
    for (run, args) in [
        ("r1", json!({"prompt": "x", "save_to": "../escape.png"})),
        (
            "r2",
            json!({"prompt": "x", "save_to": outside.path().join("new.png").to_str().unwrap()}),
        ),
        (
            "r3",
            json!({"prompt": "x", "reference_image_path": outside.path().join("ref.png").to_str().unwrap()}),
        ),
    ] {
        let (result, _) = fx.call(run, "generate_image", args.clone()).await;
        assert_eq!(result.status, Status::Failed, "{args}: {}", result.content);
        assert!(
            result.content.contains("outside the work directory")
                && result.content.contains("nothing was generated (no cost)"),
            "{}",
            result.content
        );
    }
    let (audio, _) = fx
        .call(
            "r4",
            "generate_audio",
            json!({"text": "hi", "save_to": "../up.wav"}),
        )
        .await;
    assert_eq!(audio.status, Status::Failed);
    assert!(
        audio.content.contains("outside the work directory"),
        "{}",
        audio.content
    );
    // Inside, but not something the images API takes: said in its terms, still at no cost.
    std::fs::write(fx.root().join("notes.txt"), "not an image").unwrap();
    std::fs::File::create(fx.root().join("huge.png"))
        .unwrap()
        .set_len(51 << 20)
        .unwrap();
    for (run, path, says) in [
        ("r5", "notes.txt", "is no PNG, JPEG or WebP image"),
        ("r6", "huge.png", "over the images API's 50.0 MiB limit"),
        ("r7", "missing.png", "does not exist"),
    ] {
        let (result, _) = fx
            .call(
                run,
                "generate_image",
                json!({"prompt": "x", "reference_image_path": path}),
            )
            .await;
        assert_eq!(result.status, Status::Failed, "{path}: {}", result.content);
        assert!(
            result.content.contains(says) && result.content.contains("(no cost)"),
            "{path}: {}",
            result.content
        );
    }
    assert!(server.requests().is_empty());
    assert!(!outside.path().join("new.png").exists());
}

#[tokio::test]
async fn speech_is_saved_as_served_with_its_exact_duration() {
    let audio = wav(36_000);
    let server = FakeServer::start(vec![Reply::bytes("audio/wav", &audio)]).await;
    let fx = Fixture::new(&server, true).await;
    let (result, _) = fx
        .call(
            "r1",
            "generate_audio",
            json!({"text": "Good morning", "voice": "nova", "format": "wav", "save_to": "hello.wav"}),
        )
        .await;
    assert_eq!(result.status, Status::Ok, "{}", result.content);
    let path = saved_path(&result.content);
    assert_eq!(
        result.content,
        format!(
            "[generate_audio] generated wav speech with [models.tts] gpt-4o-mini-tts: 70.4 KiB, duration 1.500 s; saved to {} and to hello.wav",
            path.display()
        )
    );
    assert!(
        path.to_string_lossy().ends_with("-good-morning.wav"),
        "{path:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), audio);
    assert_eq!(std::fs::read(fx.root().join("hello.wav")).unwrap(), audio);
    let request = server.only_request();
    assert_eq!(request.path, "/v1/audio/speech");
    assert_eq!(
        request.body,
        json!({"model": "gpt-4o-mini-tts", "input": "Good morning", "voice": "nova",
               "response_format": "wav"})
    );
}

#[tokio::test]
async fn a_429_is_waited_out_as_its_retry_after_asks_then_the_image_comes() {
    let image = png(6);
    let server = FakeServer::start(vec![
        Reply::status(429, r#"{"error":{"message":"Rate limit reached"}}"#)
            .header("retry-after-ms", "400"),
        b64_answer(&image),
    ])
    .await;
    let fx = Fixture::new(&server, true).await;
    let (result, _) = fx
        .call("r1", "generate_image", json!({"prompt": "A lighthouse"}))
        .await;
    assert_eq!(result.status, Status::Ok, "{}", result.content);
    assert_eq!(std::fs::read(saved_path(&result.content)).unwrap(), image);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1].at - requests[0].at >= Duration::from_millis(400),
        "the second attempt came before Retry-After said"
    );
    assert_eq!(requests[0].body, requests[1].body);
}

#[tokio::test]
async fn a_server_error_is_a_failed_result_that_says_what_happened() {
    let server = FakeServer::start(vec![
        Reply::status(500, r#"{"error":{"message":"The server had an error"}}"#),
        Reply::status(503, r#"{"error":{"message":"Overloaded"}}"#),
        Reply::status(400, r#"{"error":{"message":"Invalid voice 'zz'"}}"#),
    ])
    .await;
    let fx = Fixture::new(&server, true).await;
    let (result, _) = fx
        .call("r1", "generate_image", json!({"prompt": "A boat"}))
        .await;
    assert_eq!(result.status, Status::Failed);
    assert!(
        result.content.contains(
            "tool=generate_image failed: the images API ([models.img] gpt-image-1) failed: openai answered 503: Overloaded; gave up after 2 attempts; try again later, or raise max_attempts"
        ),
        "{}",
        result.content
    );
    let (speech, _) = fx
        .call("r2", "generate_audio", json!({"text": "hi", "voice": "zz"}))
        .await;
    assert_eq!(speech.status, Status::Failed);
    assert!(
        speech.content.contains(
            "the speech API ([models.tts] gpt-4o-mini-tts) failed: openai answered 400: Invalid voice 'zz'; the request was refused as sent"
        ),
        "{}",
        speech.content
    );
    assert!(!fx.deliverables().exists());
}

#[tokio::test]
async fn the_key_is_in_no_result_event_or_stored_record() {
    let server = FakeServer::start(vec![
        b64_answer(&png(7)),
        Reply::bytes("audio/wav", &wav(2400)),
        Reply::status(401, r#"{"error":{"message":"Incorrect API key provided"}}"#),
    ])
    .await;
    let fx = Fixture::new(&server, true).await;
    let mut shown = String::new();
    for (run, tool, args) in [
        ("r1", "generate_image", json!({"prompt": "A tree"})),
        ("r2", "generate_audio", json!({"text": "Tree"})),
        ("r3", "generate_image", json!({"prompt": "Another tree"})),
    ] {
        let (_, out) = fx.call(run, tool, args).await;
        shown.push_str(&serde_json::to_string(&out).unwrap());
    }
    assert!(shown.contains(r#""status":"ok""#), "{shown}");
    assert!(
        shown.contains("openai answered 401: Incorrect API key provided; check the API key, which came from the secret MEDIA_KEY"),
        "{shown}"
    );
    // A refused key ends with the store_secret hint.
    assert!(shown.contains("next: store_secret"), "{shown}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests
            .iter()
            .all(|r| r.headers["authorization"] == format!("Bearer {KEY}"))
    );
    assert!(!shown.contains(KEY), "the key is in a result or event");
    // The store: its events, transcripts and results (the secret itself is kept encrypted).
    drop(fx.engine);
    for entry in std::fs::read_dir(fx.data_dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
                "the key is in {path:?}"
            );
        }
    }
    assert!(fx.store_file.exists());
}
