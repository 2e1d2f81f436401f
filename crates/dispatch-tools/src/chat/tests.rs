//! list_chatbot and send_to_chatbot against fake Telegram and Discord servers on 127.0.0.1
//! that answer in each API's documented shapes (Telegram: `POST /bot<TOKEN>/sendMessage`,
//! `{"ok": …}`; Discord: `POST /channels/{id}/messages` with `Authorization: Bot TOKEN`),
//! through a real engine over a memory store.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dispatch_engine::{ConfirmReply, ConfirmRequest, Confirmer, Headless, Status};
use dispatch_store::ApprovedChat;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::ChatbotConfig;
use crate::test_support::*;
use crate::web::test_server::{Reply, Seen, TestServer};

const TELEGRAM_TOKEN: &str = "123456:AAH-telegram-test-token-0123456789";
const DISCORD_TOKEN: &str = "MTAx.discord-test-token.0123456789abcdef";

/// Approves every call and keeps what it was asked.
#[derive(Default)]
struct Approver {
    asked: Mutex<Vec<ConfirmRequest>>,
}

#[async_trait]
impl Confirmer for Approver {
    async fn confirm(&self, request: &ConfirmRequest) -> ConfirmReply {
        self.asked.lock().unwrap().push(request.clone());
        ConfirmReply {
            approve: true,
            ..ConfirmReply::default()
        }
    }
}

/// What the fake servers saw, with when each request arrived.
type Log = Arc<Mutex<Vec<(Instant, Value)>>>;

/// A fake Telegram Bot API. Chat 100 takes messages; chat 200 answers 429 (retry_after 1)
/// once, then takes them; chat 300 has kicked the bot (403); chat 400 is rate limited for
/// 120 s; any other token is rejected (401).
async fn telegram(log: Log) -> TestServer {
    let throttled = Arc::new(Mutex::new(false));
    TestServer::start(move |seen: &Seen| {
        let ok_path = format!("/bot{TELEGRAM_TOKEN}/sendMessage");
        if seen.path != ok_path || seen.method != "POST" {
            return json_reply(
                401,
                json!({"ok": false, "error_code": 401, "description": "Unauthorized"}),
            );
        }
        let body: Value = serde_json::from_slice(&seen.body).unwrap_or(Value::Null);
        log.lock().unwrap().push((Instant::now(), body.clone()));
        if body["parse_mode"] != "HTML" || body["text"].as_str().map_or(0, |t| t.chars().count()) > 4096 {
            return json_reply(
                400,
                json!({"ok": false, "error_code": 400, "description": "Bad Request: message is too long"}),
            );
        }
        let chat = body["chat_id"].as_i64().unwrap_or(0);
        match chat {
            200 if !std::mem::replace(&mut *throttled.lock().unwrap(), true) => json_reply(
                429,
                json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}}),
            ),
            300 => json_reply(
                403,
                json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was kicked from the group chat"}),
            ),
            400 => json_reply(
                429,
                json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 120", "parameters": {"retry_after": 120}}),
            ),
            100 | 200 => {
                let n = log.lock().unwrap().len();
                json_reply(
                    200,
                    json!({"ok": true, "result": {"message_id": n, "chat": {"id": chat, "type": "group"}, "date": 1764700000, "text": body["text"]}}),
                )
            }
            _ => json_reply(
                400,
                json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}),
            ),
        }
    })
    .await
}

/// A fake Discord REST API: channel 9001 takes messages; 9002 answers 429 (retry_after 0.5)
/// once; 9003 is a channel the bot cannot see (403 Missing Access).
async fn discord(log: Log) -> TestServer {
    let throttled = Arc::new(Mutex::new(false));
    TestServer::start(move |seen: &Seen| {
        if seen.header("authorization") != Some(&format!("Bot {DISCORD_TOKEN}")) {
            return json_reply(401, json!({"message": "401: Unauthorized", "code": 0}));
        }
        let body: Value = serde_json::from_slice(&seen.body).unwrap_or(Value::Null);
        log.lock().unwrap().push((Instant::now(), json!({"path": seen.path, "body": body})));
        if body["content"].as_str().map_or(0, |t| t.chars().count()) > 2000 {
            return json_reply(400, json!({"message": "Invalid Form Body", "code": 50035}));
        }
        match seen.path.as_str() {
            "/channels/9002/messages" if !std::mem::replace(&mut *throttled.lock().unwrap(), true) => json_reply(
                429,
                json!({"message": "You are being rate limited.", "retry_after": 0.5, "global": false}),
            ),
            "/channels/9001/messages" | "/channels/9002/messages" => {
                let n = log.lock().unwrap().len();
                json_reply(200, json!({"id": format!("70000{n}"), "channel_id": "9001", "content": body["content"]}))
            }
            "/channels/9003/messages" => json_reply(403, json!({"message": "Missing Access", "code": 50001})),
            _ => json_reply(404, json!({"message": "Unknown Channel", "code": 10003})),
        }
    })
    .await
}

fn json_reply(status: u16, body: Value) -> Reply {
    Reply::new(status, "application/json", body.to_string())
}

struct Setup {
    h: Harness,
    approver: Arc<Approver>,
    log: Log,
    _telegram: TestServer,
    _discord: TestServer,
}

async fn setup(max_retry_wait: Duration) -> Setup {
    let log: Log = Arc::default();
    let telegram = telegram(log.clone()).await;
    let discord = discord(log.clone()).await;
    let config = crate::ToolsConfig {
        chatbot: ChatbotConfig {
            telegram_api: telegram.url(""),
            discord_api: discord.url(""),
            max_retry_wait,
        },
        ..Default::default()
    };
    let approver = Arc::new(Approver::default());
    let h = Harness::with_config(&config, approver.clone());
    h.store
        .secret_set("TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN)
        .await
        .unwrap();
    h.store
        .secret_set("DISCORD_BOT_TOKEN", DISCORD_TOKEN)
        .await
        .unwrap();
    for (platform, id, name, kind) in [
        ("telegram", "100", "Team", "group"),
        ("telegram", "200", "Busy", "group"),
        ("telegram", "300", "Gone", "group"),
        ("telegram", "400", "Flooded", "group"),
        ("discord", "9001", "#general (Lab)", "guild_text"),
        ("discord", "9002", "#busy (Lab)", "guild_text"),
        ("discord", "9003", "#hidden (Lab)", "guild_text"),
    ] {
        h.store
            .approve_chat(&ApprovedChat {
                platform: platform.into(),
                id: id.into(),
                name: name.into(),
                kind: kind.into(),
                approved_ms: id.parse().unwrap(),
            })
            .await
            .unwrap();
    }
    h.select("s", "list_chatbot,send_to_chatbot").await;
    Setup {
        h,
        approver,
        log,
        _telegram: telegram,
        _discord: discord,
    }
}

fn send(id: &str, platform: &str, target: &str, message: &str) -> dispatch_engine::RawCall {
    run_tool(
        id,
        "send_to_chatbot",
        json!({"platform": platform, "target_id": target, "message": message}),
    )
}

/// Neither token appears in anything the round produced.
fn assert_no_token(out: &dispatch_engine::RoundOutcome) {
    let everything = format!(
        "{}{}",
        serde_json::to_string(&out.results).unwrap(),
        serde_json::to_string(&out.events).unwrap()
    );
    for token in [TELEGRAM_TOKEN, DISCORD_TOKEN] {
        assert!(!everything.contains(token), "token leaked: {everything}");
    }
}

#[tokio::test]
async fn list_chatbot_returns_the_approved_chats_of_one_platform() {
    let s = setup(Duration::from_secs(30)).await;
    let out =
        s.h.round(
            "s",
            "r",
            vec![
                run_tool("c1", "list_chatbot", json!({"platform": "discord"})),
                run_tool("c2", "list_chatbot", json!({"platform": "telegram"})),
            ],
        )
        .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    let listed: Value = serde_json::from_str(
        out.results[0]
            .content
            .strip_prefix("[list_chatbot] ")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        listed,
        json!([
            {"platform": "discord", "id": "9001", "name": "#general (Lab)", "kind": "guild_text"},
            {"platform": "discord", "id": "9002", "name": "#busy (Lab)", "kind": "guild_text"},
            {"platform": "discord", "id": "9003", "name": "#hidden (Lab)", "kind": "guild_text"},
        ])
    );
    assert!(out.results[1].content.contains("\"id\": \"100\""));
    assert!(!out.results[1].content.contains("9001"));
    // Read-only: nobody was asked.
    assert!(s.approver.asked.lock().unwrap().is_empty());
    assert_no_token(&out);
}

#[tokio::test]
async fn with_no_approved_chat_list_chatbot_says_how_a_person_approves_one() {
    let s = setup(Duration::from_secs(30)).await;
    for id in ["9001", "9002", "9003"] {
        assert!(s.h.store.revoke_chat("discord", id).await.unwrap());
    }
    let out =
        s.h.round(
            "s",
            "r",
            vec![run_tool(
                "c1",
                "list_chatbot",
                json!({"platform": "discord"}),
            )],
        )
        .await;
    assert_eq!(
        results(&out),
        [result(
            "c1",
            Status::Ok,
            "[list_chatbot] [] (no Discord chat is approved yet: ask the user to run `tooldispatch chatbot pending discord` to see the chats that messaged the bot, then `tooldispatch chatbot authorize discord CHAT_ID`)"
        )]
    );
}

#[tokio::test]
async fn telegram_gets_html_with_the_token_in_the_path_and_never_in_the_result() {
    let s = setup(Duration::from_secs(30)).await;
    let html =
        "<b>Build</b> passed: <a href=\"https://ci.example/1\">run 1</a> &amp; <code>main</code>";
    let out =
        s.h.round("s", "r", vec![send("c1", "telegram", "100", html)])
            .await;
    assert_eq!(
        results(&out),
        [result(
            "c1",
            Status::Ok,
            r#"[send_to_chatbot] {"message_ids":["1"],"name":"Team","ok":true,"parts":1,"platform":"telegram","target_id":"100"}"#
        )]
    );
    let seen: Vec<Value> = s
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| b.clone())
        .collect();
    assert_eq!(
        seen,
        vec![json!({"chat_id": 100, "text": html, "parse_mode": "HTML"})]
    );
    // It asked, saying whom it speaks for and where.
    let asked = s.approver.asked.lock().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0].why,
        "send_to_chatbot posts a message as your Telegram bot to chat 100, speaking for you"
    );
    assert_eq!(asked[0].remember_rule, "send_to_chatbot(telegram://100/**)");
    assert_no_token(&out);
}

#[tokio::test]
async fn discord_gets_markdown_with_the_bot_authorization_and_no_pings() {
    let s = setup(Duration::from_secs(30)).await;
    let md = "**Deploy** done — see `v1.2` @everyone";
    let out =
        s.h.round("s", "r", vec![send("c1", "discord", "9001", md)])
            .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    assert!(
        out.results[0]
            .content
            .contains(r#""message_ids":["700001"]"#)
    );
    let seen: Vec<Value> = s
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| b.clone())
        .collect();
    assert_eq!(
        seen,
        vec![
            json!({"path": "/channels/9001/messages", "body": {"content": md, "allowed_mentions": {"parse": []}}})
        ]
    );
    assert_no_token(&out);
}

#[tokio::test]
async fn a_5000_character_message_goes_to_telegram_in_two_parts_split_at_a_paragraph() {
    let s = setup(Duration::from_secs(30)).await;
    let paragraph = format!("{}end.", "word ".repeat(19));
    let message = vec![paragraph; 50].join("\n\n");
    assert_eq!(message.chars().count(), 5048);
    let out =
        s.h.round("s", "r", vec![send("c1", "telegram", "100", &message)])
            .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    assert!(
        out.results[0].content.contains(r#""parts":2"#),
        "{}",
        out.results[0].content
    );
    let texts: Vec<String> = s
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| b["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts.len(), 2);
    assert!(
        texts
            .iter()
            .all(|t| t.chars().count() <= 4096 && t.ends_with("end."))
    );
    assert_eq!(texts.join("\n\n"), message);
}

#[tokio::test]
async fn a_long_discord_message_goes_in_parts_of_at_most_2000() {
    let s = setup(Duration::from_secs(30)).await;
    let message = vec!["a line of markdown text"; 200].join("\n");
    let out =
        s.h.round("s", "r", vec![send("c1", "discord", "9001", &message)])
            .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    let contents: Vec<String> = s
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| b["body"]["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(contents.len(), 3);
    assert!(contents.iter().all(|t| t.chars().count() <= 2000));
    assert_eq!(contents.join("\n"), message);
}

#[tokio::test]
async fn a_429_is_waited_out_for_its_retry_after_then_the_message_is_sent() {
    let s = setup(Duration::from_secs(30)).await;
    let out =
        s.h.round(
            "s",
            "r",
            vec![
                send("c1", "telegram", "200", "hello"),
                send("c2", "discord", "9002", "hi"),
            ],
        )
        .await;
    assert_eq!(
        results(&out).iter().map(|r| r.1).collect::<Vec<_>>(),
        [Status::Ok, Status::Ok],
        "{:?}",
        results(&out)
    );
    let log = s.log.lock().unwrap();
    let arrivals = |pick: &dyn Fn(&Value) -> bool| -> Vec<Instant> {
        log.iter()
            .filter(|(_, b)| pick(b))
            .map(|(t, _)| *t)
            .collect()
    };
    let telegram = arrivals(&|b| b["chat_id"] == 200);
    let discord = arrivals(&|b| b["path"] == "/channels/9002/messages");
    assert_eq!((telegram.len(), discord.len()), (2, 2));
    assert!(telegram[1] - telegram[0] >= Duration::from_secs(1));
    assert!(discord[1] - discord[0] >= Duration::from_millis(500));
}

#[tokio::test]
async fn a_429_longer_than_the_cap_fails_with_when_to_retry() {
    let s = setup(Duration::from_secs(30)).await;
    let out =
        s.h.round("s", "r", vec![send("c1", "telegram", "400", "hello")])
            .await;
    let r = &out.results[0];
    assert_eq!(r.status, Status::Failed);
    assert!(
        r.content.contains("Telegram is rate-limiting the bot and asks to wait 120 s, longer than the 30 s this dispatcher waits ([chatbot] max_retry_wait_secs); nothing more was sent. Retry after ")
            && r.content.contains("UTC (in 120 s)"),
        "{}",
        r.content
    );
    assert_eq!(s.log.lock().unwrap().len(), 1, "one request, no waiting");
}

#[tokio::test]
async fn a_403_says_what_the_person_must_do() {
    let s = setup(Duration::from_secs(30)).await;
    let out =
        s.h.round(
            "s",
            "r",
            vec![
                send("c1", "telegram", "300", "hello"),
                send("c2", "discord", "9003", "hi"),
            ],
        )
        .await;
    assert_eq!(out.results[0].status, Status::Failed);
    assert!(out.results[0].content.contains(
        "Telegram refused (error 403, \"bot was kicked from the group chat\"): the bot cannot post in chat 300. It was removed from the group or channel, blocked by the user, or the user never started it. A person must add the bot back to the chat"
    ), "{}", out.results[0].content);
    assert!(out.results[1].content.contains(
        "Discord refused (error 403, \"Missing Access\"): the bot has no access to chat 9003. A person must invite the bot to that server and give its role View Channel and Send Messages in the channel"
    ), "{}", out.results[1].content);
    // Not a credential problem: the token is fine, so no store_secret hint.
    assert!(
        out.results
            .iter()
            .all(|r| !r.content.contains("store_secret"))
    );
    assert_no_token(&out);
}

#[tokio::test]
async fn a_target_that_is_not_approved_is_refused_before_any_request() {
    let s = setup(Duration::from_secs(30)).await;
    let out =
        s.h.round(
            "s",
            "r",
            vec![
                send("c1", "telegram", "999", "hello"),
                // An approved id of the other platform is not approved here.
                send("c2", "telegram", "9001", "hello"),
                send("c3", "discord", "../../users/@me", "hello"),
            ],
        )
        .await;
    assert_eq!(
        out.results[0].content.lines().next().unwrap(),
        "[send_to_chatbot] tool=send_to_chatbot failed: Telegram chat \"999\" is not an approved chat, so nothing was sent. Call list_chatbot(platform=\"telegram\") for the chats you may send to (4 approved); a person approves another with `tooldispatch chatbot authorize telegram CHAT_ID`"
    );
    assert!(
        out.results[1]
            .content
            .contains("Telegram chat \"9001\" is not an approved chat")
    );
    assert!(
        out.results[2]
            .content
            .contains("Discord chat \"../../users/@me\" is not an approved chat")
    );
    assert!(s.log.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_token_points_to_store_secret() {
    let s = setup(Duration::from_secs(30)).await;
    s.h.store.secret_delete("TELEGRAM_BOT_TOKEN").await.unwrap();
    let out =
        s.h.round(
            "s",
            "r",
            vec![
                run_tool("c1", "list_chatbot", json!({"platform": "telegram"})),
                send("c2", "telegram", "100", "hello"),
            ],
        )
        .await;
    for r in &out.results {
        assert_eq!(r.status, Status::Failed);
        assert!(
            r.content.contains("no Telegram bot token is stored"),
            "{}",
            r.content
        );
        assert!(
            r.content
                .contains("next: store_secret(key=\"TELEGRAM_BOT_TOKEN\")"),
            "{}",
            r.content
        );
    }
    assert!(s.log.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_rejected_token_is_a_credential_error_without_the_token() {
    let s = setup(Duration::from_secs(30)).await;
    s.h.store
        .secret_set("TELEGRAM_BOT_TOKEN", "999:wrong-token-value")
        .await
        .unwrap();
    let out =
        s.h.round("s", "r", vec![send("c1", "telegram", "100", "hello")])
            .await;
    let r = &out.results[0];
    assert!(r.content.contains("the Telegram API rejected the stored bot token TELEGRAM_BOT_TOKEN (HTTP 401: Unauthorized)"), "{}", r.content);
    assert!(
        r.content
            .contains("next: store_secret(key=\"TELEGRAM_BOT_TOKEN\")"),
        "{}",
        r.content
    );
    assert!(!r.content.contains("wrong-token-value"));
}

#[tokio::test]
async fn an_unreachable_api_is_reported_without_the_token_in_the_url() {
    // A port nothing listens on: reqwest's error would name the URL with the token in it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let config = crate::ToolsConfig {
        chatbot: ChatbotConfig {
            telegram_api: format!("http://127.0.0.1:{port}"),
            ..ChatbotConfig::default()
        },
        ..Default::default()
    };
    let h = Harness::with_config(&config, Arc::new(Approver::default()));
    h.store
        .secret_set("TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN)
        .await
        .unwrap();
    h.store
        .approve_chat(&ApprovedChat {
            platform: "telegram".into(),
            id: "100".into(),
            name: "Team".into(),
            kind: "group".into(),
            approved_ms: 1,
        })
        .await
        .unwrap();
    h.select("s", "send_to_chatbot").await;
    let out = h
        .round("s", "r", vec![send("c1", "telegram", "100", "hello")])
        .await;
    let r = &out.results[0];
    assert_eq!(r.status, Status::Failed);
    assert!(
        r.content.contains(&format!(
            "cannot reach the Telegram API at http://127.0.0.1:{port}"
        )),
        "{}",
        r.content
    );
    assert_no_token(&out);
}

#[tokio::test]
async fn without_anyone_to_approve_a_send_is_declined_and_nothing_goes_out() {
    let log: Log = Arc::default();
    let server = telegram(log.clone()).await;
    let config = crate::ToolsConfig {
        chatbot: ChatbotConfig {
            telegram_api: server.url(""),
            ..ChatbotConfig::default()
        },
        ..Default::default()
    };
    let h = Harness::with_config(&config, Arc::new(Headless));
    h.store
        .secret_set("TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN)
        .await
        .unwrap();
    h.select("s", "send_to_chatbot").await;
    let out = h
        .round("s", "r", vec![send("c1", "telegram", "100", "hello")])
        .await;
    assert_eq!(
        out.results[0].status,
        Status::Declined,
        "{}",
        out.results[0].content
    );
    assert!(log.lock().unwrap().is_empty());
}

#[test]
fn the_specs_say_what_each_tool_does_to_the_world() {
    use dispatch_engine::{Concurrency, Effect, Gate};
    let registry = crate::builtin_registry().unwrap();
    let list = registry.get("list_chatbot").unwrap().spec().clone();
    let send = registry.get("send_to_chatbot").unwrap().spec().clone();
    assert_eq!(
        (list.concurrency, list.gate, list.effect),
        (Concurrency::Concurrent, Gate::ReadOnly, Effect::Observes)
    );
    assert_eq!(
        (send.concurrency, send.gate, send.effect),
        (Concurrency::Concurrent, Gate::Ask, Effect::Mutates)
    );
    for tag in [
        "<b>",
        "<i>",
        "<u>",
        "<s>",
        "<code>",
        "<pre>",
        "<a href",
        "<blockquote>",
        "<tg-spoiler>",
    ] {
        assert!(send.description.contains(tag), "{tag}");
    }
}
