//! `tooldispatch chatbot pending|authorize|list|revoke` and the chatbot tools through `round`,
//! the real binary against fake Telegram and Discord APIs on 127.0.0.1 that answer in each
//! API's documented shapes (`[chatbot] telegram_api` / `discord_api` point at them).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

const TELEGRAM_TOKEN: &str = "7654321:AAF-cli-telegram-token-abcdef";
const DISCORD_TOKEN: &str = "MTIz.cli-discord-token.fedcba987654";

/// One request a fake API saw.
#[derive(Clone, Debug)]
struct Seen {
    at: Instant,
    method: String,
    path: String,
    authorization: Option<String>,
    body: Value,
}

type Handler = dyn Fn(&Seen, usize) -> (u16, Value) + Send + Sync;

/// A fake API on 127.0.0.1: `handler` gets each request and how many came before it to the
/// same path; every request is kept.
fn fake_api(handler: Box<Handler>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                continue;
            }
            let mut length = 0;
            let mut authorization = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let (name, value) = line.split_once(':').unwrap_or((&line, ""));
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "authorization" => authorization = Some(value.trim().to_string()),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let mut words = request_line.split_whitespace();
            let request = Seen {
                at: Instant::now(),
                method: words.next().unwrap_or("").to_string(),
                path: words.next().unwrap_or("").to_string(),
                authorization,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            };
            let before = {
                let mut log = log.lock().unwrap();
                let before = log.iter().filter(|s| s.path == request.path).count();
                log.push(request.clone());
                before
            };
            let (status, reply) = handler(&request, before);
            let reply = reply.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (base, seen)
}

/// Telegram: getUpdates holds a private chat (42) and a supergroup the bot was added to
/// (-1001); getChat knows both; sendMessage to -1001 answers 429 (retry_after 1) to the first
/// message, and chat 42 has blocked the bot (403).
fn telegram() -> (String, Arc<Mutex<Vec<Seen>>>) {
    fake_api(Box::new(|seen, before| {
        let Some(method) = seen.path.strip_prefix(&format!("/bot{TELEGRAM_TOKEN}/")) else {
            return (
                401,
                json!({"ok": false, "error_code": 401, "description": "Unauthorized"}),
            );
        };
        let chat = seen.body["chat_id"].as_i64();
        match (method, chat) {
            ("getUpdates", _) => (
                200,
                json!({"ok": true, "result": [
                    {"update_id": 1, "message": {"message_id": 5, "date": 1764700000, "text": "/start",
                        "from": {"id": 42, "is_bot": false, "first_name": "Ann"},
                        "chat": {"id": 42, "type": "private", "first_name": "Ann", "username": "ann"}}},
                    {"update_id": 2, "my_chat_member": {"date": 1764700001,
                        "chat": {"id": -1001, "type": "supergroup", "title": "Team"},
                        "from": {"id": 42, "is_bot": false, "first_name": "Ann"},
                        "old_chat_member": {"status": "left"}, "new_chat_member": {"status": "member"}}}
                ]}),
            ),
            ("getChat", Some(-1001)) => (
                200,
                json!({"ok": true, "result": {"id": -1001, "type": "supergroup", "title": "Team"}}),
            ),
            ("getChat", Some(42)) => (
                200,
                json!({"ok": true, "result": {"id": 42, "type": "private", "first_name": "Ann", "username": "ann"}}),
            ),
            ("sendMessage", Some(-1001)) if seen.body["parse_mode"] == "HTML" => {
                if seen.body["text"].as_str().unwrap_or("").chars().count() > 4096 {
                    return (
                        400,
                        json!({"ok": false, "error_code": 400, "description": "Bad Request: message is too long"}),
                    );
                }
                if before == 0 {
                    return (
                        429,
                        json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}}),
                    );
                }
                (
                    200,
                    json!({"ok": true, "result": {"message_id": 100 + before, "date": 1764700002, "chat": {"id": -1001, "type": "supergroup"}}}),
                )
            }
            ("sendMessage", Some(42)) => (
                403,
                json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}),
            ),
            _ => (
                400,
                json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}),
            ),
        }
    }))
}

/// Discord: the bot is in one server with a text channel (555), a voice channel (556) and an
/// announcement channel (557); 555 answers 429 (retry_after 0.25) to the first message; 557
/// is missing the Send Messages permission (403).
fn discord() -> (String, Arc<Mutex<Vec<Seen>>>) {
    fake_api(Box::new(|seen, before| {
        if seen.authorization.as_deref() != Some(&format!("Bot {DISCORD_TOKEN}")) {
            return (401, json!({"message": "401: Unauthorized", "code": 0}));
        }
        match (seen.method.as_str(), seen.path.as_str()) {
            ("GET", "/users/@me/guilds") => (
                200,
                json!([{"id": "77", "name": "Lab", "owner": false, "permissions": "0"}]),
            ),
            ("GET", "/guilds/77/channels") => (
                200,
                json!([
                    {"id": "555", "type": 0, "guild_id": "77", "name": "general", "position": 0},
                    {"id": "556", "type": 2, "guild_id": "77", "name": "Voice", "position": 1},
                    {"id": "557", "type": 5, "guild_id": "77", "name": "news", "position": 2}
                ]),
            ),
            ("GET", "/channels/555") => (
                200,
                json!({"id": "555", "type": 0, "guild_id": "77", "name": "general"}),
            ),
            ("GET", "/channels/557") => (
                200,
                json!({"id": "557", "type": 5, "guild_id": "77", "name": "news"}),
            ),
            ("POST", "/channels/555/messages") if before == 0 => (
                429,
                json!({"message": "You are being rate limited.", "retry_after": 0.25, "global": false}),
            ),
            ("POST", "/channels/555/messages") => (
                200,
                json!({"id": format!("9{before}"), "channel_id": "555", "content": seen.body["content"]}),
            ),
            ("POST", "/channels/557/messages") => (
                403,
                json!({"message": "Missing Permissions", "code": 50013}),
            ),
            _ => (404, json!({"message": "Unknown Channel", "code": 10003})),
        }
    }))
}

/// `tooldispatch chatbot ARGS --store … --config …`.
fn chatbot(td: &Td, config: &std::path::Path, args: &[&str]) -> std::process::Output {
    td.bare()
        .arg("chatbot")
        .args(args)
        .arg("--store")
        .arg(format!("sqlite:{}", td.store_path().display()))
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
}

fn set_secret(td: &Td, name: &str, value: &str) {
    let out = td
        .bare()
        .args(["secret", "set", name, "--store"])
        .arg(format!("sqlite:{}", td.store_path().display()))
        .write_stdin(value)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Everything a command printed, checked for both tokens.
fn assert_no_token(what: &str) {
    for token in [TELEGRAM_TOKEN, DISCORD_TOKEN] {
        assert!(!what.contains(token), "a bot token was printed: {what}");
    }
}

#[test]
fn telegram_chats_are_approved_by_a_person_then_the_model_lists_and_sends() {
    let td = Td::new();
    let (api, seen) = telegram();
    let config = td.file(
        "chatbot.toml",
        &format!("[chatbot]\ntelegram_api = \"{api}\"\nmax_retry_wait_secs = 5\n"),
    );
    let mut printed = String::new();

    // No token yet: every command says how to store one.
    let out = chatbot(&td, &config, &["pending", "telegram"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        "tooldispatch: no Telegram bot token is stored: run `tooldispatch secret set TELEGRAM_BOT_TOKEN` and paste the token (from @BotFather), then retry"
    );
    set_secret(&td, "TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN);

    let out = chatbot(&td, &config, &["pending", "telegram", "--json"]);
    printed += &format!("{out:?}");
    assert_eq!(
        stdout_json(&out),
        json!([
            {"id": "42", "name": "Ann (@ann)", "kind": "private", "approved": false},
            {"id": "-1001", "name": "Team", "kind": "supergroup", "approved": false}
        ])
    );
    let out = chatbot(&td, &config, &["authorize", "telegram", "-1001"]);
    printed += &format!("{out:?}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stderr)
            .starts_with("tooldispatch: approved telegram chat -1001 \"Team\" (supergroup)"),
        "{out:?}"
    );
    let out = chatbot(
        &td,
        &config,
        &["authorize", "telegram", "42", "--name", "Ann (me)"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // An id the bot cannot see is not approved.
    let out = chatbot(&td, &config, &["authorize", "telegram", "777"]);
    printed += &format!("{out:?}");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("Telegram does not know chat 777 (HTTP 400: Bad Request: chat not found)"),
        "{out:?}"
    );
    let out = chatbot(&td, &config, &["authorize", "telegram", "12; DROP"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not a Telegram chat id"),
        "{out:?}"
    );

    let out = chatbot(&td, &config, &["pending", "telegram"]);
    assert_eq!(
        text(&out.stdout),
        "42\tprivate\tAnn (@ann)\tapproved\n-1001\tsupergroup\tTeam\tapproved\n"
    );
    let listed = stdout_json(&chatbot(&td, &config, &["list", "--json"]));
    let names: Vec<(&str, &str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap(),
                c["name"].as_str().unwrap(),
                c["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("-1001", "Team", "supergroup"),
            ("42", "Ann (me)", "private")
        ]
    );

    // The model: list, then send (HTML, a 429 waited out, 5,000 characters in two parts, a
    // 403, a target nobody approved).
    let cfg = config.to_str().unwrap();
    td.round(
        "s",
        "sel",
        &[],
        &select("sel", "list_chatbot,send_to_chatbot"),
    );
    let long = vec![format!("{}end.", "word ".repeat(19)); 50].join("\n\n");
    let send = |target: &str, message: &str| {
        run_tool(
            "send_to_chatbot",
            json!({"platform": "telegram", "target_id": target, "message": message}),
        )
    };
    let report = td.report(
        "s",
        "r",
        &["--config", cfg, "--approve", "all"],
        &openai(&[
            (
                "c1",
                "run_tool",
                run_tool("list_chatbot", json!({"platform": "telegram"})),
            ),
            (
                "c2",
                "run_tool",
                send(
                    "-1001",
                    "<b>Build</b> passed &amp; <a href=\"https://ci.example/1\">logs</a>",
                ),
            ),
        ]),
    );
    printed += &report.to_string();
    assert_eq!(
        statuses(&report),
        pairs(&[("c1", "ok"), ("c2", "ok")]),
        "{report}"
    );
    let chats: Value = serde_json::from_str(
        report["results"][0]["content"]
            .as_str()
            .unwrap()
            .strip_prefix("[list_chatbot] ")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        chats,
        json!([
            {"platform": "telegram", "id": "-1001", "name": "Team", "kind": "supergroup"},
            {"platform": "telegram", "id": "42", "name": "Ann (me)", "kind": "private"}
        ])
    );
    assert_eq!(
        report["results"][1]["content"],
        r#"[send_to_chatbot] {"message_ids":["101"],"name":"Team","ok":true,"parts":1,"platform":"telegram","target_id":"-1001"}"#
    );
    let report = td.report(
        "s",
        "r2",
        &["--config", cfg, "--approve", "all"],
        &openai(&[
            ("c3", "run_tool", send("-1001", &long)),
            ("c4", "run_tool", send("42", "hi")),
            ("c5", "run_tool", send("-2002", "hi")),
        ]),
    );
    printed += &report.to_string();
    assert_eq!(
        statuses(&report),
        pairs(&[("c3", "ok"), ("c4", "failed"), ("c5", "failed")]),
        "{report}"
    );
    assert!(
        report["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains(r#""parts":2"#)
    );
    let blocked = report["results"][1]["content"].as_str().unwrap();
    assert!(!blocked.contains("store_secret"), "{blocked}");
    assert!(blocked.contains("Telegram refused (error 403, \"bot was blocked by the user\"): the bot cannot post in chat 42.") && blocked.contains("press Start (or unblock it)"), "{blocked}");
    assert!(report["results"][2]["content"].as_str().unwrap().contains("Telegram chat \"-2002\" is not an approved chat, so nothing was sent. Call list_chatbot(platform=\"telegram\")"));

    let seen = seen.lock().unwrap().clone();
    let sends: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.path.ends_with("/sendMessage") && s.body["chat_id"] == -1001)
        .collect();
    // The 429, its retry at least 1 s later, the two parts; one to the blocked chat; nothing
    // to the chat nobody approved.
    assert_eq!(sends.len(), 4, "{sends:#?}");
    assert_eq!(
        seen.iter()
            .filter(|s| s.body["chat_id"] == 42 && s.path.ends_with("/sendMessage"))
            .count(),
        1
    );
    assert!(sends[1].at - sends[0].at >= Duration::from_secs(1));
    assert_eq!(
        sends[1].body,
        json!({"chat_id": -1001, "text": "<b>Build</b> passed &amp; <a href=\"https://ci.example/1\">logs</a>", "parse_mode": "HTML"})
    );
    let parts: Vec<&str> = sends[2..4]
        .iter()
        .map(|s| s.body["text"].as_str().unwrap())
        .collect();
    assert!(parts.iter().all(|p| p.chars().count() <= 4096));
    assert_eq!(parts.join("\n\n"), long);
    assert!(seen.iter().all(|s| s.body["chat_id"] != -2002));

    // Revoked: refused from now on.
    let out = chatbot(&td, &config, &["revoke", "telegram", "42"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = chatbot(&td, &config, &["revoke", "telegram", "42"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("telegram chat 42 is not approved"));
    let out = chatbot(&td, &config, &["list"]);
    assert_eq!(text(&out.stdout), "telegram\t-1001\tsupergroup\tTeam\n");
    assert_no_token(&printed);
}

#[test]
fn discord_channels_of_the_bots_servers_are_approved_and_get_markdown() {
    let td = Td::new();
    let (api, seen) = discord();
    let config = td.file(
        "chatbot.toml",
        &format!("[chatbot]\ndiscord_api = \"{api}\"\n"),
    );
    set_secret(&td, "DISCORD_BOT_TOKEN", DISCORD_TOKEN);
    let mut printed = String::new();

    let out = chatbot(&td, &config, &["pending", "discord", "--json"]);
    printed += &format!("{out:?}");
    // Voice channels cannot take text messages and are not offered.
    assert_eq!(
        stdout_json(&out),
        json!([
            {"id": "555", "name": "#general (Lab)", "kind": "guild_text", "approved": false},
            {"id": "557", "name": "#news (Lab)", "kind": "guild_announcement", "approved": false}
        ])
    );
    for id in ["555", "557"] {
        let out = chatbot(&td, &config, &["authorize", "discord", id]);
        printed += &format!("{out:?}");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }

    let cfg = config.to_str().unwrap();
    td.round("s", "sel", &[], &select("sel", "send_to_chatbot"));
    let md = "**Release** `v2` is out\n\n```sh\ncargo install tooldispatch\n```";
    let send = |target: &str| {
        run_tool(
            "send_to_chatbot",
            json!({"platform": "discord", "target_id": target, "message": md}),
        )
    };
    let report = td.report(
        "s",
        "r",
        &["--config", cfg, "--approve", "all"],
        &openai(&[
            ("c1", "run_tool", send("555")),
            ("c2", "run_tool", send("557")),
        ]),
    );
    printed += &report.to_string();
    assert_eq!(
        statuses(&report),
        pairs(&[("c1", "ok"), ("c2", "failed")]),
        "{report}"
    );
    assert!(
        report["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains(r#""message_ids":["91"]"#),
        "{report}"
    );
    assert!(report["results"][1]["content"].as_str().unwrap().contains(
        "Discord refused (error 403, \"Missing Permissions\"): the bot has no access to chat 557. A person must invite the bot to that server and give its role View Channel and Send Messages in the channel"
    ), "{report}");

    let seen = seen.lock().unwrap().clone();
    let posts: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.path == "/channels/555/messages")
        .collect();
    assert_eq!(posts.len(), 2);
    assert!(posts[1].at - posts[0].at >= Duration::from_millis(250));
    assert_eq!(
        posts[1].body,
        json!({"content": md, "allowed_mentions": {"parse": []}})
    );
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some(&format!("Bot {DISCORD_TOKEN}")))
    );
    assert_no_token(&printed);
}

#[test]
fn without_approval_a_headless_round_declines_the_send() {
    let td = Td::new();
    let (api, seen) = telegram();
    let config = td.file(
        "chatbot.toml",
        &format!("[chatbot]\ntelegram_api = \"{api}\"\n"),
    );
    set_secret(&td, "TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN);
    let out = chatbot(&td, &config, &["authorize", "telegram", "-1001"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    td.round("s", "sel", &[], &select("sel", "send_to_chatbot"));
    let report = td.report(
        "s",
        "r",
        &["--config", config.to_str().unwrap()],
        &openai(&[(
            "c1",
            "run_tool",
            run_tool(
                "send_to_chatbot",
                json!({"platform": "telegram", "target_id": "-1001", "message": "hi"}),
            ),
        )]),
    );
    assert_eq!(statuses(&report), pairs(&[("c1", "declined")]), "{report}");
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|s| !s.path.ends_with("/sendMessage"))
    );
}
