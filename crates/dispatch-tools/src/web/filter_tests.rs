use super::*;
use pretty_assertions::assert_eq;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const PAGE: &str = "\
[Skip to content](#main)

We use cookies to improve your experience. [Accept all](/ok) [Privacy policy](/privacy)

* [Home](/)
* [Docs](/docs)

# Harbour guide

The harbour lies at the mouth of the river and dries at low water springs.

## Tides

High water at the quay is forty minutes after high water at the bar.

Spring tides run two knots in the narrows.

## Moorings

Visitors' moorings are in the pool below the bridge; the harbour office allocates them.

```
Mooring fee: 20 per night
© not a copyright line inside code
```

## History

The quay was built in 1820 for the slate trade, when schooners loaded roofing slate brought down the valley by a narrow-gauge railway. The railway closed in 1946 and the trade moved to the deep-water port along the coast; the warehouses became workshops and, later, the sailing club. A plaque by the steps names the masters who traded from here.

## Fuel

Diesel is sold at the fuel berth on the north quay from 8 to 6.

Share this: [Twitter](https://t/x) [Facebook](https://f/x)

* [Home](/)
* [Docs](/docs)

© 2026 Harbour Office. All rights reserved.";

const CLEAN: &str = "\
# Harbour guide

The harbour lies at the mouth of the river and dries at low water springs.

## Tides

High water at the quay is forty minutes after high water at the bar.

Spring tides run two knots in the narrows.

## Moorings

Visitors' moorings are in the pool below the bridge; the harbour office allocates them.

```
Mooring fee: 20 per night
© not a copyright line inside code
```

## History

The quay was built in 1820 for the slate trade, when schooners loaded roofing slate brought down the valley by a narrow-gauge railway. The railway closed in 1946 and the trade moved to the deep-water port along the coast; the warehouses became workshops and, later, the sailing club. A plaque by the steps names the masters who traded from here.

## Fuel

Diesel is sold at the fuel berth on the north quay from 8 to 6.";

fn run(text: &str, focus: Option<&str>, budget: usize) -> Filtered {
    DeterministicFilter.apply(text, focus, budget)
}

#[test]
fn boilerplate_goes_and_everything_else_stays_when_it_fits() {
    assert_eq!(
        run(PAGE, None, 10_000),
        Filtered {
            text: CLEAN.to_string(),
            note: None
        }
    );
    assert_eq!(
        run(PAGE, Some("fuel"), 10_000),
        Filtered {
            text: CLEAN.to_string(),
            note: None
        }
    );
}

#[test]
fn without_focus_the_head_of_the_page_is_kept() {
    let out = run(PAGE, None, 420);
    assert_eq!(
        out.text,
        "[filtered: kept the first 2 of 5 sections (215 bytes of 821 bytes); call again with a focus to get the sections about a topic]\n\n\
# Harbour guide\n\n\
The harbour lies at the mouth of the river and dries at low water springs.\n\n\
## Tides\n\n\
High water at the quay is forty minutes after high water at the bar.\n\n\
Spring tides run two knots in the narrows."
    );
}

#[test]
fn focus_keeps_the_most_relevant_sections_in_page_order() {
    let out = run(PAGE, Some("where to buy diesel fuel"), 300);
    assert_eq!(
        out,
        Filtered {
            text: "[filtered: kept 1 of 5 sections most relevant to \"where to buy diesel fuel\" (72 bytes of 821 bytes); call again with a different focus or fetch a narrower url for the rest]\n\n\
## Fuel\n\nDiesel is sold at the fuel berth on the north quay from 8 to 6."
                .to_string(),
            note: None,
        }
    );
    let two = run(PAGE, Some("tides mooring"), 700);
    assert_eq!(
        two.text,
        "[filtered: kept 2 of 5 sections most relevant to \"tides mooring\" (295 bytes of 821 bytes); call again with a different focus or fetch a narrower url for the rest]\n\n\
## Tides\n\n\
High water at the quay is forty minutes after high water at the bar.\n\n\
Spring tides run two knots in the narrows.\n\n\
## Moorings\n\n\
Visitors' moorings are in the pool below the bridge; the harbour office allocates them.\n\n\
```\nMooring fee: 20 per night\n© not a copyright line inside code\n```"
    );
}

#[test]
fn a_focus_nothing_matches_says_so_and_keeps_the_head() {
    let out = run(PAGE, Some("helicopter"), 300);
    assert_eq!(
        out.text,
        "[filtered: no section mentions \"helicopter\"; kept the first 1 of 5 sections (91 bytes of 821 bytes); call again with a different focus or fetch a narrower url]\n\n\
# Harbour guide\n\n\
The harbour lies at the mouth of the river and dries at low water springs."
    );
}

#[test]
fn same_input_same_output() {
    for budget in [0, 50, 200, 300, 420, 10_000] {
        assert_eq!(
            run(PAGE, Some("tides"), budget),
            run(PAGE, Some("tides"), budget)
        );
    }
}

#[test]
fn an_oversized_section_is_cut_on_a_char_boundary() {
    let text = "żółw ".repeat(400);
    let out = run(&text, None, 200);
    let (header, body) = out.text.split_once("\n\n").unwrap();
    assert_eq!(
        header,
        format!(
            "[filtered: kept the first 1 of 1 sections, the last one cut short ({} bytes of 3.1 KB); call again with a focus to get the sections about a topic]",
            body.len()
        )
    );
    // The header reserves room for its longest form ("1023 bytes of 3.1 KB", 148 bytes), which
    // leaves 50 bytes for the text; byte 50 falls inside "ó".
    assert_eq!(body, "żółw ".repeat(6) + "ż");
    assert!(out.text.len() <= 200);
}

#[test]
fn a_long_section_is_split_and_its_heading_repeated_for_a_part_shown_alone() {
    let paragraph = |i: usize| format!("Paragraph {i} about the quay wall and its granite blocks.");
    let filler: Vec<String> = (0..60).map(paragraph).collect();
    let text = format!(
        "## Quay\n\n{}\n\nThe old lighthouse keeper lived in the tower.\n\n## Other\n\nNothing here.",
        filler.join("\n\n")
    );
    // Parts are cut at 2000 bytes: "## Quay" and paragraphs 0–33 fill the first (1969 bytes).
    let second_part: Vec<String> = (34..60).map(paragraph).collect();
    let expected_body = format!(
        "## Quay (continued)\n{}\n\nThe old lighthouse keeper lived in the tower.",
        second_part.join("\n\n")
    );
    let out = run(&text, Some("lighthouse keeper"), 2500);
    assert_eq!(
        out.text,
        format!(
            "[filtered: kept 1 of 3 sections most relevant to \"lighthouse keeper\" (1.5 KB of 3.5 KB); call again with a different focus or fetch a narrower url for the rest]\n\n{expected_body}"
        )
    );
    assert_eq!(expected_body.len(), 1573);
}

#[test]
fn tiny_budgets_never_overflow() {
    for budget in 0..120 {
        let out = run(PAGE, Some("fuel"), budget);
        assert!(out.text.len() <= budget, "{budget}: {}", out.text.len());
    }
}

#[test]
fn stemming_matches_plural_and_ing_forms() {
    assert_eq!(
        focus_terms("How do I use the mooring buoys?"),
        vec!["moor".to_string(), "buoy".to_string()]
    );
    assert_eq!(stem("threads"), "thread");
    assert_eq!(stem("class"), "class");
}

proptest::proptest! {
    #[test]
    fn any_text_any_budget_fits(text in "(\\PC|\n|#|`){0,600}", budget in 0usize..700, focus in proptest::option::of("[a-zé ]{0,20}")) {
        let out = run(&text, focus.as_deref(), budget);
        proptest::prop_assert!(out.text.len() <= budget);
        proptest::prop_assert_eq!(out, run(&text, focus.as_deref(), budget));
    }
}

/// A one-request-at-a-time HTTP/1.1 responder on 127.0.0.1:0 that records what it was sent.
struct Peer {
    base_url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                break;
            }
        }
    }
    String::from_utf8(buf).unwrap()
}

async fn peer(status: &'static str, body: String) -> Peer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let request = read_request(&mut stream).await;
            seen.lock().unwrap().push(request);
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(response.as_bytes()).await.unwrap();
            stream.shutdown().await.unwrap();
        }
    });
    Peer { base_url, requests }
}

/// The shape of an OpenAI chat.completion response, as such servers send it.
fn chat_completion(content: &str) -> String {
    json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1741570283,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "default",
        "system_fingerprint": "fp_06737a9306"
    })
    .to_string()
}

fn config(base_url: &str) -> ModelFilterConfig {
    ModelFilterConfig {
        api_key: Some("sk-test-123".to_string()),
        ..ModelFilterConfig::new(base_url, "filter-model")
    }
}

#[tokio::test]
async fn model_filter_returns_the_models_answer() {
    let answer = "## Fuel\n\nDiesel is sold at the fuel berth on the north quay from 8 to 6.";
    let server = peer("200 OK", chat_completion(answer)).await;
    let filter = ModelFilter::new(config(&server.base_url)).unwrap();
    let out = filter.filter(PAGE, Some("diesel"), 2000).await;
    assert_eq!(
        out,
        Filtered {
            text: answer.to_string(),
            note: None
        }
    );

    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    let (head, body) = requests[0].split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("authorization: bearer sk-test-123"),
        "{head}"
    );
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "filter-model",
            "temperature": 0,
            "messages": [
                {"role": "system", "content": MODEL_INSTRUCTION},
                {"role": "user", "content": format!("Focus: diesel\nBudget: 2000 bytes\n\n<page>\n{PAGE}\n</page>")}
            ]
        })
    );
}

#[tokio::test]
async fn model_filter_fails_open_on_a_server_error() {
    let server = peer(
        "500 Internal Server Error",
        r#"{"error":{"message":"boom"}}"#.to_string(),
    )
    .await;
    let filter = ModelFilter::new(config(&server.base_url)).unwrap();
    let out = filter.filter(PAGE, Some("fuel"), 300).await;
    assert_eq!(
        out,
        Filtered {
            note: Some("model filter unavailable (HTTP 500 Internal Server Error); showing the built-in filter's result".to_string()),
            ..run(PAGE, Some("fuel"), 300)
        }
    );
}

#[tokio::test]
async fn model_filter_fails_open_on_an_answer_that_is_not_a_completion() {
    let server = peer("200 OK", "<html>proxy login</html>".to_string()).await;
    let filter = ModelFilter::new(config(&server.base_url)).unwrap();
    let out = filter.filter(PAGE, None, 300).await;
    assert_eq!(
        out.note.as_deref(),
        Some(
            "model filter unavailable (its answer was not a chat completion); showing the built-in filter's result"
        )
    );
    assert_eq!(out.text, run(PAGE, None, 300).text);

    let empty = peer("200 OK", chat_completion("  ")).await;
    let out = ModelFilter::new(config(&empty.base_url))
        .unwrap()
        .filter(PAGE, None, 300)
        .await;
    assert_eq!(
        out.note.as_deref(),
        Some(
            "model filter unavailable (its answer had no message content); showing the built-in filter's result"
        )
    );
}

#[tokio::test]
async fn model_filter_fails_open_when_the_server_never_answers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            held.push(stream); // accepted, never answered
        }
    });
    let filter = ModelFilter::new(ModelFilterConfig {
        timeout: Duration::from_millis(300),
        ..config(&base_url)
    })
    .unwrap();
    let started = std::time::Instant::now();
    let out = filter.filter(PAGE, Some("fuel"), 300).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        out,
        Filtered {
            note: Some("model filter unavailable (no answer within 0.3 s); showing the built-in filter's result".to_string()),
            ..run(PAGE, Some("fuel"), 300)
        }
    );
}

#[tokio::test]
async fn model_filter_fails_open_when_nothing_listens() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let out = ModelFilter::new(config(&base_url))
        .unwrap()
        .filter(PAGE, None, 10_000)
        .await;
    assert_eq!(
        out,
        Filtered {
            text: CLEAN.to_string(),
            note: Some(format!(
                "model filter unavailable (could not connect to {base_url}); showing the built-in filter's result"
            )),
        }
    );
}

#[test]
fn the_api_key_stays_out_of_debug_output() {
    let shown = format!("{:?}", config("http://127.0.0.1:1/v1"));
    assert!(
        !shown.contains("sk-test-123") && shown.contains("[set]"),
        "{shown}"
    );
}
