//! The web tools as the CLI sets them up from the config file: `[net] allow_hosts` lets them
//! reach a server on 127.0.0.1, and `[filter]` puts a model-backed filter (here a local
//! server streaming like an OpenAI-compatible API, the one peer we replay) in front of
//! fetch_page's text, falling back to the built-in filter when the model cannot be reached.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use serde_json::json;

use super::support::*;

const PAGE: &str = "<html><head><title>Ferrets</title></head><body><article><h1>Ferrets</h1><p>Ferrets sleep for fourteen hours a day and play in short bursts.</p><p>They were domesticated about 2,500 years ago.</p></article></body></html>";

/// A server on 127.0.0.1 serving `/page` and a chat-completions endpoint; its `host:port`.
fn site() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let (kind, reply) = if request_line.starts_with("POST /v1/chat/completions") {
                // Every model request streams: answer as an OpenAI chat.completion.chunk stream,
                // the text in two deltas, usage in the last chunk, then the end marker.
                let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(request["stream"], true, "{request}");
                assert_eq!(request["model"], "filter-model", "{request}");
                let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
                    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                           "created": 1764547200, "model": "filter-model",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                };
                let usage = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                   "created": 1764547200, "model": "filter-model", "choices": [],
                                   "usage": {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129}});
                let events = [
                    chunk(
                        json!({"role": "assistant", "content": "Ferrets sleep about "}),
                        json!(null),
                    ),
                    chunk(json!({"content": "fourteen hours a day."}), json!(null)),
                    chunk(json!({}), json!("stop")),
                    usage,
                ];
                let mut stream = String::new();
                for event in events {
                    stream.push_str(&format!("data: {event}\n\n"));
                }
                stream.push_str("data: [DONE]\n\n");
                ("text/event-stream", stream)
            } else {
                ("text/html; charset=utf-8", PAGE.to_string())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    addr
}

fn fetch(td: &Td, config: &std::path::Path, session: &str, url: &str) -> String {
    td.round(session, "m", &[], &select("m", "fetch_page"));
    let reply = openai(&[(
        "f",
        "run_tool",
        run_tool("fetch_page", json!({"link": url, "focus": "sleep"})),
    )]);
    let config = config.to_str().unwrap();
    let out = td.round(session, "r", &["--config", config], &reply);
    out[0]["content"].as_str().unwrap().to_string()
}

#[test]
fn a_configured_model_filter_trims_the_page_and_an_unreachable_one_falls_back() {
    let td = Td::new();
    let api = site();
    let url = format!("http://{api}/page");
    let with_model = td.file(
        "model.toml",
        &format!(
            "[net]\nallow_hosts = [\"{api}\"]\n[filter]\nbase_url = \"http://{api}/v1\"\nmodel = \"filter-model\"\n"
        ),
    );
    assert_eq!(
        fetch(&td, &with_model, "s1", &url),
        "[fetch_page] Ferrets sleep about fourteen hours a day."
    );

    // A port nothing listens on: the built-in filter's text, with a one-line note.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let unreachable = td.file(
        "down.toml",
        &format!(
            "[net]\nallow_hosts = [\"{api}\"]\n[filter]\nbase_url = \"http://{closed}/v1\"\nmodel = \"m\"\ntimeout_secs = 2\n"
        ),
    );
    let text = fetch(&td, &unreachable, "s2", &url);
    assert!(
        text.contains("model filter unavailable (")
            && text.contains("showing the built-in filter's result"),
        "{text}"
    );
    assert!(
        text.contains("Ferrets sleep for fourteen hours a day"),
        "{text}"
    );

    // Without the allow-list entry the guard refuses the loopback server.
    let plain = td.file("plain.toml", "");
    let refused = fetch(&td, &plain, "s3", &url);
    assert!(refused.contains("loopback"), "{refused}");
}
