//! Wire formats: how each provider's model reply carries tool calls, and how the results and the
//! tools array must look to go back to that provider.
//!
//! Each provider is one file implementing [`WireFormat`]; the engine only ever sees
//! [`RawCall`]s in and [`WireResult`]s out.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

mod anthropic;
mod claude_code;
mod gemini;
mod openai;
mod openai_responses;

/// The model API a round comes from and goes back to. Adding one: a file implementing
/// [`WireFormat`], its `mod` line, a variant, and an arm in `as_str` and `format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI Chat Completions (`openai.rs`).
    OpenAi,
    /// Anthropic Messages (`anthropic.rs`).
    Anthropic,
    /// The claude-code text protocol (`claude_code.rs`).
    ClaudeCode,
    /// OpenAI Responses (`openai_responses.rs`).
    OpenAiResponses,
    /// Gemini generateContent (`gemini.rs`).
    Gemini,
}

impl Provider {
    /// Every provider, in the order the CLI lists them.
    pub const ALL: [Provider; 5] = [
        Provider::OpenAi,
        Provider::Anthropic,
        Provider::ClaudeCode,
        Provider::OpenAiResponses,
        Provider::Gemini,
    ];

    /// The name the CLI, the HTTP API and error messages use.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::ClaudeCode => "claude-code",
            Provider::OpenAiResponses => "openai-responses",
            Provider::Gemini => "gemini",
        }
    }

    /// The wire format that parses this provider's replies and renders its messages.
    pub fn format(self) -> &'static dyn WireFormat {
        match self {
            Provider::OpenAi => &openai::ChatCompletions,
            Provider::Anthropic => &anthropic::Messages,
            Provider::ClaudeCode => &claude_code::TextProtocol,
            Provider::OpenAiResponses => &openai_responses::Responses,
            Provider::Gemini => &gemini::GenerateContent,
        }
    }
}

impl FromStr for Provider {
    type Err = WireError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Provider::ALL.iter().map(|p| p.as_str()).collect();
                WireError(format!(
                    "unknown provider {s:?}; use one of: {}",
                    names.join(", ")
                ))
            })
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tool call as the model sent it. Every field is kept byte for byte: the engine cleans
/// the name up to find the tool, but answers with the id (and, where a format wants it, the
/// name) exactly as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawCall {
    /// The call's id: the provider's own, which the result must echo, or one the parser made
    /// up when the provider sent none (see `id_origin`).
    pub id: String,
    /// Whether the provider sent `id`. A made-up id names the call in events and reports
    /// only; its result goes back without an id. Being a type and not a reserved string, no
    /// id a model sends can be mistaken for a made-up one.
    pub id_origin: IdOrigin,
    /// The tool name as the model wrote it.
    pub name: String,
    /// The arguments as JSON text, possibly invalid: the engine reports that to the model.
    pub arguments: String,
}

impl RawCall {
    /// A call whose id the provider sent.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        RawCall {
            id: id.into(),
            id_origin: IdOrigin::Sent,
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// A call the provider sent without an id, named `id` by the parser.
    fn made_up(id: String, name: String, arguments: String) -> Self {
        RawCall {
            id,
            id_origin: IdOrigin::MadeUp,
            name,
            arguments,
        }
    }

    /// The id a result must carry: `None` when the provider sent none.
    pub fn sent_id(&self) -> Option<&str> {
        (self.id_origin == IdOrigin::Sent).then_some(self.id.as_str())
    }
}

/// Where a call's id came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdOrigin {
    /// The provider sent it; results answer it byte for byte.
    #[default]
    Sent,
    /// The provider sent none (OpenAI's legacy `function_call`, a Gemini call without `id`,
    /// claude-code text); the parser made one up, distinct from every id the reply sent.
    MadeUp,
}

impl IdOrigin {
    /// For `skip_serializing_if`: reports mention the origin only when the id was made up.
    pub fn is_sent(&self) -> bool {
        *self == IdOrigin::Sent
    }
}

/// One committed result to render.
#[derive(Clone, Copy, Debug)]
pub struct WireResult<'a> {
    /// The id of the call this result answers, as the provider sent it; `None` when it sent
    /// none, and the result is matched to its call by name and order.
    pub tool_call_id: Option<&'a str>,
    /// The tool name exactly as the model wrote it (`run_tool` for a wrapped call), for
    /// formats that match results to calls by name.
    pub name: &'a str,
    /// The result text the model reads.
    pub content: &'a str,
    /// Whether the call failed, for formats that carry a flag.
    pub is_error: bool,
    /// Images the result carries, as `data:` URLs.
    pub images: &'a [String],
}

/// One entry of the request's tools array.
#[derive(Clone, Copy, Debug)]
pub struct ToolDecl<'a> {
    /// The tool name.
    pub name: &'a str,
    /// What the tool does, for the model.
    pub description: &'a str,
    /// The JSON Schema of the arguments.
    pub parameters: &'a Value,
}

/// A reply that cannot be read as tool calls, with a message a developer can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WireError {}

/// One provider's wire format.
pub trait WireFormat: Send + Sync {
    /// The tool calls of one assistant reply, given as the raw text the caller sent.
    fn parse_reply(&self, input: &str) -> Result<Vec<RawCall>, WireError>;
    /// The messages that carry these results back to the model, in call order.
    fn render_results(&self, results: &[WireResult<'_>]) -> Vec<Value>;
    /// The request's tools array.
    fn render_tools(&self, tools: &[ToolDecl<'_>]) -> Vec<Value>;
}

/// Split a `data:<media type>;base64,<data>` URL.
pub fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_at_checked(5)?;
    if !scheme.eq_ignore_ascii_case("data:") {
        return None;
    }
    let (header, data) = rest.split_once(',')?;
    // Parameters such as `;charset=utf-8` may sit between the media type and `;base64`; the
    // providers want the bare media type.
    let (media_type, params) = header.split_once(';')?;
    let is_base64 = params
        .rsplit(';')
        .next()
        .is_some_and(|last| last.eq_ignore_ascii_case("base64"));
    (is_base64 && media_type.contains('/')).then_some((media_type, data))
}

/// An error about a reply, prefixed with the provider so a mixed-up `--provider` shows at once.
fn reply_error(provider: Provider, message: impl fmt::Display) -> WireError {
    WireError(format!("{provider}: {message}"))
}

/// Which provider's reply `reply` is, by the fields only that provider's replies carry, or
/// `None` when it shows none. A parser refuses another provider's reply with
/// [`wrong_provider`] instead of finding no calls in it (exit 0, the model's calls lost).
fn sent_by(reply: &Value) -> Option<Provider> {
    let has_type = |items: &[Value], wanted: &str| {
        items
            .iter()
            .any(|i| i.get("type").and_then(Value::as_str) == Some(wanted))
    };
    match reply {
        Value::Array(items) if has_type(items, "function_call") => Some(Provider::OpenAiResponses),
        Value::Object(m) => {
            let present = |key: &str| m.get(key).is_some_and(|v| !v.is_null());
            if present("tool_calls") || present("function_call") || present("choices") {
                Some(Provider::OpenAi)
            } else if m.get("output").is_some_and(Value::is_array) {
                Some(Provider::OpenAiResponses)
            } else if present("candidates")
                || present("parts")
                // A single Gemini candidate: no other format's `content` is an object.
                || m.get("content").and_then(|c| c.get("parts")).is_some_and(|p| !p.is_null())
            {
                Some(Provider::Gemini)
            } else if m
                .get("content")
                .and_then(Value::as_array)
                .is_some_and(|blocks| has_type(blocks, "tool_use"))
            {
                Some(Provider::Anthropic)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The error for a reply of `other`'s format sent as `own`'s.
fn wrong_provider(own: Provider, other: Provider) -> WireError {
    reply_error(own, this_is(other))
}

/// "this is <other's format>; send it with provider <other>".
fn this_is(other: Provider) -> String {
    let what = match other {
        Provider::OpenAi => {
            "an OpenAI Chat Completions reply (tool_calls, function_call or choices)"
        }
        Provider::OpenAiResponses => "an OpenAI Responses reply (function_call items in output)",
        Provider::Anthropic => "an Anthropic Messages reply (tool_use blocks)",
        Provider::Gemini => "a Gemini reply (candidates or parts)",
        Provider::ClaudeCode => "claude-code text",
    };
    format!("this is {what}; send it with provider {other}")
}

/// `Err` when `reply` is not a model's reply ([`refuse_non_reply`]) or is another provider's
/// ([`refuse_other_provider`]): what every format checks before it looks for calls.
fn refuse_foreign(own: Provider, reply: &Value) -> Result<(), WireError> {
    refuse_non_reply(own, reply)?;
    refuse_other_provider(own, reply)
}

/// `Err(wrong_provider)` when `reply` is another provider's.
fn refuse_other_provider(own: Provider, reply: &Value) -> Result<(), WireError> {
    match sent_by(reply) {
        Some(other) if other != own => Err(wrong_provider(own, other)),
        _ => Ok(()),
    }
}

/// `Err` when `reply` is not a model's reply at all: a request body, a message of another role
/// (user, system, tool), or a wrapper around the message that is no provider's response. Only an
/// assistant reply is a round; anything else would read as a reply without calls (`[]`, exit 0)
/// and hide that the caller sent the wrong thing.
fn refuse_non_reply(own: Provider, reply: &Value) -> Result<(), WireError> {
    match not_a_reply(reply) {
        Some(what) => Err(reply_error(
            own,
            format!(
                "this is {what}, not the model's reply; send {}",
                expected(own)
            ),
        )),
        None => Ok(()),
    }
}

/// What `reply` is when it is not a model's reply, in words for the error.
fn not_a_reply(reply: &Value) -> Option<String> {
    // The model speaks as "assistant" (Chat Completions, Messages, Responses) or "model" (Gemini).
    let other_role = |item: &Value| {
        item.get("role")
            .and_then(Value::as_str)
            .filter(|role| !matches!(*role, "assistant" | "model"))
            .map(str::to_owned)
    };
    match reply {
        Value::Object(m) => {
            // What is sent to the model, with the conversation so far: no provider's reply
            // carries these at the top.
            if let Some(key) = ["messages", "contents", "input"]
                .into_iter()
                .find(|key| m.contains_key(*key))
            {
                return Some(format!("a request body (it has {key:?})"));
            }
            if let Some(role) = other_role(reply) {
                return Some(format!("a {role:?} message"));
            }
            // A choice (`{"index":0,"message":…}`) or another API's envelope around the message.
            m.get("message")
                .is_some_and(Value::is_object)
                .then(|| "a wrapper around the message (it has \"message\")".to_owned())
        }
        // An input list: what was sent to the model, not what it answered.
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            if let Some(role) = other_role(item) {
                return Some(format!(
                    "a list of input items (item {i} is a {role:?} message)"
                ));
            }
            let item_type = item.get("type").and_then(Value::as_str)?;
            item_type.ends_with("_output").then(|| {
                format!(
                    "a list of input items (item {i} is a {item_type}, a result sent to the model)"
                )
            })
        }),
        _ => None,
    }
}

/// What `provider` reads, for errors that say what to send instead.
fn expected(provider: Provider) -> &'static str {
    match provider {
        Provider::OpenAi => {
            "the assistant message (choices[0].message, with tool_calls) or the whole chat.completion response"
        }
        Provider::OpenAiResponses => "the response (with output) or its output array",
        Provider::Anthropic => {
            "the assistant message (role \"assistant\", content blocks) or the whole Messages API response"
        }
        Provider::Gemini => {
            "the model's Content (role \"model\", parts) or the whole generateContent response"
        }
        Provider::ClaudeCode => "the assistant's text, or its message object",
    }
}

/// Parses the reply as JSON; serde_json's recursion limit keeps hostile nesting from overflowing
/// the stack.
fn parse_json(input: &str) -> Result<Value, WireError> {
    if input.trim().is_empty() {
        return Err(WireError(
            "the reply is empty: send the assistant message as JSON".to_owned(),
        ));
    }
    serde_json::from_str(input).map_err(|e| {
        let hint = if input.contains("<tool_call") {
            "; this looks like claude-code text (<tool_call> tags): send it with provider claude-code"
        } else {
            ""
        };
        WireError(format!("the reply is not valid JSON: {e}{hint}"))
    })
}

/// Names a JSON value's type for "got …" in error messages.
use crate::registry::kind_of as kind;

/// Drops the locations after checking the ids the provider sent are distinct (results are
/// matched to calls by id, so a repeated id would make two results indistinguishable to the
/// provider), then names the calls it sent without one ([`name_unsent`]).
fn distinct_ids(
    provider: Provider,
    located: Vec<(String, RawCall)>,
) -> Result<Vec<RawCall>, WireError> {
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for (at, call) in &located {
        let Some(id) = call.sent_id() else { continue };
        if let Some(first) = seen.insert(id, at) {
            return Err(reply_error(
                provider,
                format!("{at} has id {id:?}, already used by {first}; every call needs its own id"),
            ));
        }
    }
    let mut calls: Vec<RawCall> = located.into_iter().map(|(_, call)| call).collect();
    name_unsent(&mut calls);
    Ok(calls)
}

/// Gives each call sent without an id the id `call_<n>` (n its 1-based place in the reply),
/// or `call_<n>_<k>` when the reply sent that id itself: events, reports and the engine's
/// bookkeeping need every call of a round to have an id of its own.
fn name_unsent(calls: &mut [RawCall]) {
    if calls.iter().all(|c| c.id_origin == IdOrigin::Sent) {
        return;
    }
    let mut taken: std::collections::HashSet<String> = calls
        .iter()
        .filter_map(|c| c.sent_id())
        .map(str::to_owned)
        .collect();
    for (i, call) in calls.iter_mut().enumerate() {
        if call.id_origin == IdOrigin::Sent {
            continue;
        }
        let base = format!("call_{}", i + 1);
        let mut id = base.clone();
        let mut k = 2;
        while taken.contains(&id) {
            id = format!("{base}_{k}");
            k += 1;
        }
        taken.insert(id.clone());
        call.id = id;
    }
}

/// What every format's tests build replies and expectations from.
#[cfg(test)]
pub(crate) mod test_calls {
    use super::{RawCall, WireError, WireResult};

    pub fn result<'a>(
        id: &'a str,
        name: &'a str,
        content: &'a str,
        is_error: bool,
        images: &'a [String],
    ) -> WireResult<'a> {
        WireResult {
            tool_call_id: Some(id),
            name,
            content,
            is_error,
            images,
        }
    }

    /// The result of a call the provider sent without an id.
    pub fn unsent_result<'a>(
        name: &'a str,
        content: &'a str,
        is_error: bool,
        images: &'a [String],
    ) -> WireResult<'a> {
        WireResult {
            tool_call_id: None,
            name,
            content,
            is_error,
            images,
        }
    }

    /// The result a round gives a parsed call: its id as sent (none if made up), its name as
    /// written.
    pub fn answer<'a>(call: &'a RawCall, content: &'a str) -> WireResult<'a> {
        WireResult {
            tool_call_id: call.sent_id(),
            name: &call.name,
            content,
            is_error: false,
            images: &[],
        }
    }

    pub fn call(id: &str, name: &str, arguments: &str) -> RawCall {
        RawCall::new(id, name, arguments)
    }

    /// A call the provider sent without an id, as the parser names it.
    pub fn unsent(id: &str, name: &str, arguments: &str) -> RawCall {
        RawCall::made_up(id.to_owned(), name.to_owned(), arguments.to_owned())
    }

    pub fn error(message: &str) -> Result<Vec<RawCall>, WireError> {
        Err(WireError(message.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn provider_names_round_trip_through_from_str_and_display() {
        let names: Vec<String> = Provider::ALL.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            names,
            [
                "openai",
                "anthropic",
                "claude-code",
                "openai-responses",
                "gemini"
            ]
        );
        for provider in Provider::ALL {
            assert_eq!(provider.as_str().parse::<Provider>(), Ok(provider));
        }
    }

    #[test]
    fn unknown_provider_lists_the_known_ones() {
        assert_eq!(
            "gpt".parse::<Provider>(),
            Err(WireError(
                r#"unknown provider "gpt"; use one of: openai, anthropic, claude-code, openai-responses, gemini"#.to_owned()
            ))
        );
        assert_eq!(
            "OpenAI".parse::<Provider>().map_err(|e| e.to_string()),
            Err(
                r#"unknown provider "OpenAI"; use one of: openai, anthropic, claude-code, openai-responses, gemini"#
                    .to_owned()
            )
        );
    }

    #[test]
    fn each_provider_maps_to_its_own_tools_shape() {
        let schema = json!({"type": "object"});
        let tools = [ToolDecl {
            name: "t",
            description: "d",
            parameters: &schema,
        }];
        let shapes: Vec<Value> = Provider::ALL
            .iter()
            .map(|p| Value::Array(p.format().render_tools(&tools)))
            .collect();
        assert_eq!(
            shapes,
            [
                json!([{"type": "function", "function": {"name": "t", "description": "d", "parameters": {"type": "object"}}}]),
                json!([{"name": "t", "description": "d", "input_schema": {"type": "object"}}]),
                json!([{"name": "t", "description": "d", "parameters": {"type": "object"}}]),
                json!([{"type": "function", "name": "t", "description": "d", "parameters": {"type": "object"}, "strict": false}]),
                json!([{"functionDeclarations": [{"name": "t", "description": "d"}]}]),
            ]
        );
    }

    #[test]
    fn split_data_url_returns_media_type_and_data() {
        assert_eq!(
            split_data_url("data:image/png;base64,iVBORw0KGgo="),
            Some(("image/png", "iVBORw0KGgo="))
        );
        assert_eq!(
            split_data_url("DATA:image/jpeg;BASE64,/9j/"),
            Some(("image/jpeg", "/9j/"))
        );
        assert_eq!(
            split_data_url("data:image/svg+xml;charset=utf-8;base64,PHN2Zz4="),
            Some(("image/svg+xml", "PHN2Zz4="))
        );
    }

    #[test]
    fn split_data_url_rejects_anything_but_base64_data_urls() {
        for url in [
            "",
            "data:",
            "dat",
            "https://example.com/a.png",
            "data:image/png,rawbytes",
            "data:;base64,AAAA",
            "data:image/png;base64",
            "data:image/png;base64x,AAAA",
            "dataé:image/png;base64,AAAA",
        ] {
            assert_eq!(split_data_url(url), None, "{url}");
        }
    }

    #[test]
    fn wire_error_displays_its_message_and_is_an_error() {
        let error: Box<dyn std::error::Error> = Box::new(WireError("bad reply".to_owned()));
        assert_eq!(error.to_string(), "bad reply");
    }

    #[test]
    fn empty_and_invalid_json_name_the_problem() {
        assert_eq!(
            parse_json("  \n"),
            Err(WireError(
                "the reply is empty: send the assistant message as JSON".to_owned()
            ))
        );
        assert_eq!(
            parse_json("{"),
            Err(WireError(
                "the reply is not valid JSON: EOF while parsing an object at line 1 column 1"
                    .to_owned()
            ))
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = "[".repeat(1_000_000);
        let error = parse_json(&deep).map_err(|e| e.0);
        assert_eq!(
            error,
            Err(
                "the reply is not valid JSON: recursion limit exceeded at line 1 column 128"
                    .to_owned()
            )
        );
    }

    #[test]
    fn repeated_call_ids_are_rejected_with_both_positions() {
        let call = |id: &str| RawCall::new(id, "t", "{}");
        let located = vec![
            ("tool_calls[0]".to_owned(), call("a")),
            ("tool_calls[1]".to_owned(), call("b")),
            ("tool_calls[2]".to_owned(), call("a")),
        ];
        assert_eq!(
            distinct_ids(Provider::OpenAi, located),
            Err(WireError(
                r#"openai: tool_calls[2] has id "a", already used by tool_calls[0]; every call needs its own id"#
                    .to_owned()
            ))
        );
    }
}

#[cfg(test)]
mod provider_mixups {
    use super::*;

    /// One reply with one call in each provider's own format.
    fn replies() -> [(Provider, &'static str); 5] {
        [
            (
                Provider::OpenAi,
                r#"{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"calculate","arguments":"{}"}}]}"#,
            ),
            (
                Provider::Anthropic,
                r#"{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"calculate","input":{}}]}"#,
            ),
            (
                Provider::OpenAiResponses,
                r#"[{"type":"function_call","call_id":"c","name":"calculate","arguments":"{}"}]"#,
            ),
            (
                Provider::Gemini,
                r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"calculate","args":{}}}]}}]}"#,
            ),
            (
                Provider::ClaudeCode,
                r#"<tool_call name="calculate">{}</tool_call>"#,
            ),
        ]
    }

    /// Every provider reads its own reply's call and refuses every other provider's reply:
    /// none is taken as a reply without calls (exit 0, the model's calls lost).
    #[test]
    fn each_provider_reads_its_own_reply_and_refuses_the_others() {
        for (own, reply) in replies() {
            assert_eq!(
                own.format().parse_reply(reply).map(|calls| calls.len()),
                Ok(1),
                "{own} reading its own reply"
            );
            for (other, _) in replies().iter().filter(|(p, _)| *p != own) {
                let parsed = other.format().parse_reply(reply);
                assert!(parsed.is_err(), "{other} took {own}'s reply: {parsed:?}");
            }
        }
    }

    /// Only a model's reply is a round: a user, system or tool message, a whole request body, an
    /// input list or a wrapper around the message is refused by every provider, naming what it
    /// is and what to send, instead of being read as a reply without calls (`[]`, exit 0).
    #[test]
    fn what_is_not_a_reply_is_refused_by_every_provider() {
        let cases = [
            (
                r#"{"role":"user","content":"What is 2+2?"}"#,
                r#"a "user" message"#,
            ),
            (
                r#"{"role":"user","parts":[{"text":"What is 2+2?"}]}"#,
                r#"a "user" message"#,
            ),
            (
                r#"{"role":"system","content":"Be brief."}"#,
                r#"a "system" message"#,
            ),
            (
                r#"{"role":"tool","tool_call_id":"c1","content":"4"}"#,
                r#"a "tool" message"#,
            ),
            (
                r#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}],"tools":[]}"#,
                r#"a request body (it has "messages")"#,
            ),
            (
                r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"calculate","input":{}}]}]}"#,
                r#"a request body (it has "messages")"#,
            ),
            (
                r#"{"contents":[{"role":"model","parts":[{"functionCall":{"name":"calculate","args":{}}}]}]}"#,
                r#"a request body (it has "contents")"#,
            ),
            (
                r#"{"model":"gpt-5","input":"What is 2+2?"}"#,
                r#"a request body (it has "input")"#,
            ),
            (
                r#"[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c","name":"calculate","arguments":"{}"}]"#,
                r#"a list of input items (item 0 is a "user" message)"#,
            ),
            (
                r#"[{"type":"function_call_output","call_id":"c","output":"4"}]"#,
                "a list of input items (item 0 is a function_call_output, a result sent to the model)",
            ),
            (
                r#"{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"calculate","arguments":"{}"}}]},"finish_reason":"tool_calls"}"#,
                r#"a wrapper around the message (it has "message")"#,
            ),
            (
                r#"{"model":"llama3","message":{"role":"assistant","content":"hi"},"done":true}"#,
                r#"a wrapper around the message (it has "message")"#,
            ),
        ];
        for provider in Provider::ALL {
            for (reply, says) in cases {
                let error = provider.format().parse_reply(reply).map_err(|e| e.0);
                let want = format!(
                    "{provider}: this is {says}, not the model's reply; send {}",
                    expected(provider)
                );
                assert_eq!(error, Err(want), "{provider} given {reply}");
            }
        }
    }

    /// Chat Completions messages may leave out `role`, but an object with none of a message's
    /// fields is not a reply without calls.
    #[test]
    fn an_object_that_is_no_message_is_refused_by_openai() {
        for reply in ["{}", r#"{"id":"x","usage":{"total_tokens":3}}"#] {
            let error = Provider::OpenAi
                .format()
                .parse_reply(reply)
                .map_err(|e| e.0);
            assert!(
                error
                    .as_ref()
                    .is_err_and(|e| e.contains("none of an assistant message's fields")),
                "{reply}: {error:?}"
            );
        }
        let text_only = r#"{"content":"It is 4."}"#;
        assert_eq!(
            Provider::OpenAi.format().parse_reply(text_only),
            Ok(Vec::new())
        );
    }

    /// A single Gemini candidate carries the Content under `content`, which OpenAI read as a
    /// message without calls (found by the fuzz targets).
    #[test]
    fn a_single_gemini_candidate_is_refused_as_gemini() {
        let reply = r#"{"content":{"role":"model","parts":[{"functionCall":{"name":"calculate","args":{}}}]},"finishReason":"STOP"}"#;
        assert_eq!(
            Provider::Gemini
                .format()
                .parse_reply(reply)
                .map(|c| c.len()),
            Ok(1)
        );
        for other in Provider::ALL.into_iter().filter(|&p| p != Provider::Gemini) {
            let error = other.format().parse_reply(reply).map_err(|e| e.0);
            assert_eq!(
                error,
                Err(format!(
                    "{other}: this is a Gemini reply (candidates or parts); send it with provider gemini"
                )),
                "{other}"
            );
        }
    }
}
