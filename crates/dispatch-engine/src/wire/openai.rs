//! OpenAI Chat Completions: calls arrive in the assistant message's `tool_calls`, results go back
//! as one `tool` message each.

use serde_json::{Map, Value, json};

use super::{
    Provider, RawCall, ToolDecl, WireError, WireFormat, WireResult, distinct_ids, expected, kind,
    parse_json, refuse_non_reply, refuse_other_provider, reply_error,
};

const PROVIDER: Provider = Provider::OpenAi;

/// The OpenAI Chat Completions wire format.
pub struct ChatCompletions;

impl WireFormat for ChatCompletions {
    fn parse_reply(&self, input: &str) -> Result<Vec<RawCall>, WireError> {
        let reply = parse_json(input)?;
        refuse_non_reply(PROVIDER, &reply)?;
        let message = assistant_message(&reply)?;
        if let Some(calls) = present(message.get("tool_calls")) {
            let Value::Array(calls) = calls else {
                return Err(fail(format!(
                    "tool_calls must be an array, got {}",
                    kind(calls)
                )));
            };
            if !calls.is_empty() {
                let located = calls
                    .iter()
                    .enumerate()
                    .map(|(i, call)| tool_call(i, call))
                    .collect::<Result<Vec<_>, _>>()?;
                return distinct_ids(PROVIDER, located);
            }
        }
        if let Some(call) = present(message.get("function_call")) {
            return legacy_call(call).map(|call| vec![call]);
        }
        reject_anthropic_blocks(message)?;
        refuse_other_provider(PROVIDER, &reply)?;
        // Only an assistant message is a reply without calls; `{}` or an unrelated object is a
        // mistake to name, not an empty round.
        if !["role", "content", "tool_calls", "refusal"]
            .into_iter()
            .any(|key| message.contains_key(key))
        {
            return Err(fail(format!(
                "this has none of an assistant message's fields (role, content, tool_calls); send {}",
                expected(PROVIDER)
            )));
        }
        Ok(Vec::new())
    }

    fn render_results(&self, results: &[WireResult<'_>]) -> Vec<Value> {
        let mut messages: Vec<Value> = results
            .iter()
            .map(|r| {
                match r.tool_call_id {
                    Some(id) => json!({"role": "tool", "tool_call_id": id, "content": r.content}),
                    // Only the legacy function_call comes without an id: it is answered by a
                    // `function` message, as the API rejects a `tool` message whose id matches
                    // no tool_calls entry.
                    None => json!({"role": "function", "name": r.name, "content": r.content}),
                }
            })
            .collect();
        // Tool messages take text only, so the images of the whole round follow in one user
        // message, after every tool message (the API wants those right after the assistant's).
        let images: Vec<Value> = results
            .iter()
            .flat_map(|r| r.images)
            .map(|url| json!({"type": "image_url", "image_url": {"url": url}}))
            .collect();
        if !images.is_empty() {
            messages.push(json!({"role": "user", "content": images}));
        }
        messages
    }

    fn render_tools(&self, tools: &[ToolDecl<'_>]) -> Vec<Value> {
        tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                })
            })
            .collect()
    }
}

fn fail(message: impl std::fmt::Display) -> WireError {
    reply_error(PROVIDER, message)
}

/// Treats an explicit `null` like an absent key: compatible servers send either.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

/// The assistant message itself, or `choices[0].message` of a whole chat.completion (further
/// choices are alternatives the caller did not pick, so they are not ours to run).
fn assistant_message(reply: &Value) -> Result<&Map<String, Value>, WireError> {
    let Value::Object(reply) = reply else {
        refuse_other_provider(PROVIDER, reply)?;
        return Err(fail(format!(
            "the reply must be an object (the assistant message or a chat.completion), got {}",
            kind(reply)
        )));
    };
    let Some(choices) = present(reply.get("choices")) else {
        return Ok(reply);
    };
    let Value::Array(choices) = choices else {
        return Err(fail(format!(
            "choices must be an array, got {}",
            kind(choices)
        )));
    };
    let Some(choice) = choices.first() else {
        return Err(fail("choices is empty: the response carries no message"));
    };
    let Value::Object(choice) = choice else {
        return Err(fail(format!(
            "choices[0] must be an object, got {}",
            kind(choice)
        )));
    };
    match (present(choice.get("message")), choice.get("delta")) {
        (Some(Value::Object(message)), _) => Ok(message),
        (Some(other), _) => Err(fail(format!(
            "choices[0].message must be an object, got {}",
            kind(other)
        ))),
        (None, Some(_)) => Err(fail(
            "choices[0] has a delta, not a message: join the streamed chunks into one message first",
        )),
        (None, None) => Err(fail("choices[0].message is missing")),
    }
}

fn tool_call(i: usize, call: &Value) -> Result<(String, RawCall), WireError> {
    let at = format!("tool_calls[{i}]");
    let Value::Object(call) = call else {
        return Err(fail(format!("{at} must be an object, got {}", kind(call))));
    };
    match call.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if t == "function" => {}
        Some(Value::String(t)) => {
            return Err(fail(format!(
                "{at}.type is {t:?}; only \"function\" calls can be dispatched"
            )));
        }
        Some(other) => {
            return Err(fail(format!(
                "{at}.type must be a string, got {}",
                kind(other)
            )));
        }
    }
    let id = required_string(call, "id", &at)?;
    if id.is_empty() {
        return Err(fail(format!(
            "{at}.id is empty: the result could not refer to the call"
        )));
    }
    let function = match call.get("function") {
        None | Some(Value::Null) => return Err(fail(format!("{at}.function is missing"))),
        Some(Value::Object(function)) => function,
        Some(other) => {
            return Err(fail(format!(
                "{at}.function must be an object, got {}",
                kind(other)
            )));
        }
    };
    let at_function = format!("{at}.function");
    let call = RawCall::new(
        id,
        required_string(function, "name", &at_function)?,
        arguments(function.get("arguments")),
    );
    Ok((at, call))
}

fn legacy_call(call: &Value) -> Result<RawCall, WireError> {
    let Value::Object(call) = call else {
        return Err(fail(format!(
            "function_call must be an object, got {}",
            kind(call)
        )));
    };
    // The legacy field carries one call and no id.
    let mut calls = vec![RawCall::made_up(
        String::new(),
        required_string(call, "name", "function_call")?.to_owned(),
        arguments(call.get("arguments")),
    )];
    super::name_unsent(&mut calls);
    Ok(calls.remove(0))
}

fn required_string<'v>(
    object: &'v Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<&'v str, WireError> {
    match object.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(fail(format!("{at}.{key} is missing"))),
        Some(other) => Err(fail(format!(
            "{at}.{key} must be a string, got {}",
            kind(other)
        ))),
    }
}

/// The API sends a string, kept byte-for-byte; some compatible servers send the object itself.
/// Absent arguments mean a call without arguments.
fn arguments(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => "{}".to_owned(),
        Some(other) => other.to_string(),
    }
}

/// An Anthropic message sent with the wrong provider would otherwise parse as "no calls" and
/// silently do nothing.
fn reject_anthropic_blocks(message: &Map<String, Value>) -> Result<(), WireError> {
    let Some(Value::Array(blocks)) = message.get("content") else {
        return Ok(());
    };
    let tool_use = blocks
        .iter()
        .position(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"));
    match tool_use {
        Some(i) => Err(fail(format!(
            "content[{i}] is an Anthropic tool_use block; send this reply with provider anthropic"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_calls::{answer, call, error, result, unsent, unsent_result};
    use pretty_assertions::assert_eq;

    fn parse(input: &str) -> Result<Vec<RawCall>, WireError> {
        ChatCompletions.parse_reply(input)
    }

    /// OpenAI's parallel function calling example: two get_weather calls in one message.
    const PARALLEL: &str = r#"{
        "role": "assistant",
        "content": null,
        "tool_calls": [
            {"id": "call_12345xyz", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris, France\"}"}},
            {"id": "call_67890abc", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"location\":\"Bogot\\u00e1, Colombia\"}"}}
        ],
        "refusal": null
    }"#;

    #[test]
    fn parses_a_single_call_from_the_assistant_message() {
        let input = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"x","arguments":"{\"a\":1}"}}]}"#;
        assert_eq!(parse(input), Ok(vec![call("call_1", "x", r#"{"a":1}"#)]));
    }

    #[test]
    fn parses_parallel_calls_in_order_keeping_ids_and_argument_bytes() {
        assert_eq!(
            parse(PARALLEL),
            Ok(vec![
                call(
                    "call_12345xyz",
                    "get_weather",
                    r#"{"location":"Paris, France"}"#
                ),
                // The \u00e1 escape stays as written: arguments are never re-serialised.
                call(
                    "call_67890abc",
                    "get_weather",
                    r#"{"location":"Bogot\u00e1, Colombia"}"#
                ),
            ])
        );
    }

    #[test]
    fn keeps_argument_whitespace_key_order_and_invalid_json_as_sent() {
        let input = r#"{"role":"assistant","tool_calls":[
            {"id":"c1","type":"function","function":{"name":"b","arguments":"{ \"z\": 1,\n  \"a\" : 2.50 }"}},
            {"id":"c2","type":"function","function":{"name":"a","arguments":"{\"unclosed\": "}}
        ]}"#;
        assert_eq!(
            parse(input),
            Ok(vec![
                call("c1", "b", "{ \"z\": 1,\n  \"a\" : 2.50 }"),
                call("c2", "a", r#"{"unclosed": "#),
            ])
        );
    }

    #[test]
    fn parses_the_first_choice_of_a_whole_chat_completion() {
        let input = r#"{
            "id": "chatcmpl-abc123",
            "object": "chat.completion",
            "created": 1741569952,
            "model": "gpt-4.1-2025-04-14",
            "choices": [
                {"index": 0,
                 "message": {"role": "assistant", "content": null,
                             "tool_calls": [{"id": "call_abc", "type": "function",
                                             "function": {"name": "get_weather", "arguments": "{\"location\":\"Boston, MA\"}"}}]},
                 "logprobs": null,
                 "finish_reason": "tool_calls"},
                {"index": 1,
                 "message": {"role": "assistant", "content": null,
                             "tool_calls": [{"id": "call_other", "type": "function",
                                             "function": {"name": "other", "arguments": "{}"}}]},
                 "finish_reason": "tool_calls"}
            ],
            "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}
        }"#;
        assert_eq!(
            parse(input),
            Ok(vec![call(
                "call_abc",
                "get_weather",
                r#"{"location":"Boston, MA"}"#
            )])
        );
    }

    #[test]
    fn other_providers_replies_are_refused_naming_the_provider() {
        let cases = [
            (
                r#"[{"type":"function_call","call_id":"c","name":"x","arguments":"{}"}]"#,
                "openai: this is an OpenAI Responses reply (function_call items in output); send it with provider openai-responses",
            ),
            (
                r#"{"id":"resp_1","object":"response","output":[{"type":"function_call","call_id":"c","name":"x","arguments":"{}"}]}"#,
                "openai: this is an OpenAI Responses reply (function_call items in output); send it with provider openai-responses",
            ),
            (
                r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"x","args":{}}}]}}]}"#,
                "openai: this is a Gemini reply (candidates or parts); send it with provider gemini",
            ),
            (
                r#"{"role":"model","parts":[{"functionCall":{"name":"x","args":{}}}]}"#,
                "openai: this is a Gemini reply (candidates or parts); send it with provider gemini",
            ),
        ];
        for (input, message) in cases {
            assert_eq!(parse(input), error(message), "{input}");
        }
    }

    #[test]
    fn a_reply_without_tool_calls_has_no_calls() {
        for input in [
            r#"{"role":"assistant","content":"Hello!"}"#,
            r#"{"role":"assistant","content":"Hi","tool_calls":null}"#,
            r#"{"role":"assistant","content":"Hi","tool_calls":[]}"#,
            r#"{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}"#,
        ] {
            assert_eq!(parse(input), Ok(vec![]), "{input}");
        }
    }

    #[test]
    fn object_arguments_from_compatible_servers_are_serialised() {
        let input = r#"{"role":"assistant","tool_calls":[
            {"id":"c1","type":"function","function":{"name":"x","arguments":{"b":[1,2],"a":"é"}}},
            {"id":"c2","function":{"name":"y"}},
            {"id":"c3","function":{"name":"z","arguments":null}}
        ]}"#;
        assert_eq!(
            parse(input),
            Ok(vec![
                call("c1", "x", r#"{"a":"é","b":[1,2]}"#),
                call("c2", "y", "{}"),
                call("c3", "z", "{}"),
            ])
        );
    }

    #[test]
    fn parses_the_legacy_function_call_as_a_call_without_id() {
        let input = r#"{"role":"assistant","content":null,"function_call":{"name":"get_current_weather","arguments":"{\n\"location\": \"Boston, MA\"\n}"}}"#;
        assert_eq!(
            parse(input),
            Ok(vec![unsent(
                "call_1",
                "get_current_weather",
                "{\n\"location\": \"Boston, MA\"\n}"
            )])
        );
    }

    #[test]
    fn names_the_missing_or_mistyped_field() {
        let cases = [
            (
                r#"{"tool_calls":[{"id":"a","function":{"name":"x"}},{"id":"b","function":{"arguments":"{}"}}]}"#,
                "openai: tool_calls[1].function.name is missing",
            ),
            (
                r#"{"tool_calls":[{"function":{"name":"x"}}]}"#,
                "openai: tool_calls[0].id is missing",
            ),
            (
                r#"{"tool_calls":[{"id":"","function":{"name":"x"}}]}"#,
                "openai: tool_calls[0].id is empty: the result could not refer to the call",
            ),
            (
                r#"{"tool_calls":[{"id":7,"function":{"name":"x"}}]}"#,
                "openai: tool_calls[0].id must be a string, got a number",
            ),
            (
                r#"{"tool_calls":[{"id":"a"}]}"#,
                "openai: tool_calls[0].function is missing",
            ),
            (
                r#"{"tool_calls":[{"id":"a","function":"x"}]}"#,
                "openai: tool_calls[0].function must be an object, got a string",
            ),
            (
                r#"{"tool_calls":[{"id":"a","function":{"name":["x"]}}]}"#,
                "openai: tool_calls[0].function.name must be a string, got an array",
            ),
            (
                r#"{"tool_calls":[{"id":"a","type":"custom","custom":{"name":"x","input":"y"}}]}"#,
                r#"openai: tool_calls[0].type is "custom"; only "function" calls can be dispatched"#,
            ),
            (
                r#"{"tool_calls":[{"id":"a","type":1,"function":{"name":"x"}}]}"#,
                "openai: tool_calls[0].type must be a string, got a number",
            ),
            (
                r#"{"tool_calls":[true]}"#,
                "openai: tool_calls[0] must be an object, got a boolean",
            ),
            (
                r#"{"tool_calls":{"id":"a"}}"#,
                "openai: tool_calls must be an array, got an object",
            ),
            (
                r#"{"function_call":{"arguments":"{}"}}"#,
                "openai: function_call.name is missing",
            ),
            (
                r#"{"function_call":"x"}"#,
                "openai: function_call must be an object, got a string",
            ),
            (
                r#"[{"role":"assistant"}]"#,
                "openai: the reply must be an object (the assistant message or a chat.completion), got an array",
            ),
            (
                r#"{"choices":[]}"#,
                "openai: choices is empty: the response carries no message",
            ),
            (
                r#"{"choices":{}}"#,
                "openai: choices must be an array, got an object",
            ),
            (
                r#"{"choices":[1]}"#,
                "openai: choices[0] must be an object, got a number",
            ),
            (
                r#"{"choices":[{"index":0}]}"#,
                "openai: choices[0].message is missing",
            ),
            (
                r#"{"choices":[{"message":"hi"}]}"#,
                "openai: choices[0].message must be an object, got a string",
            ),
            (
                r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[]}}]}"#,
                "openai: choices[0] has a delta, not a message: join the streamed chunks into one message first",
            ),
        ];
        for (input, message) in cases {
            assert_eq!(parse(input), error(message), "{input}");
        }
    }

    #[test]
    fn rejects_invalid_json_with_the_parser_message() {
        assert_eq!(
            parse(r#"{"role":"assistant",}"#),
            error("the reply is not valid JSON: trailing comma at line 1 column 21")
        );
    }

    #[test]
    fn rejects_repeated_call_ids() {
        let input = r#"{"tool_calls":[
            {"id":"call_1","function":{"name":"a","arguments":"{}"}},
            {"id":"call_1","function":{"name":"b","arguments":"{}"}}
        ]}"#;
        assert_eq!(
            parse(input),
            error(
                r#"openai: tool_calls[1] has id "call_1", already used by tool_calls[0]; every call needs its own id"#
            )
        );
    }

    #[test]
    fn points_an_anthropic_message_to_the_anthropic_provider() {
        let input = r#"{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"toolu_01","name":"x","input":{}}]}"#;
        assert_eq!(
            parse(input),
            error(
                "openai: content[1] is an Anthropic tool_use block; send this reply with provider anthropic"
            )
        );
    }

    #[test]
    fn hostile_inputs_are_errors_or_calls_never_panics() {
        let huge = "x".repeat(8 << 20);
        let huge_call = format!(
            r#"{{"tool_calls":[{{"id":"c","function":{{"name":"{huge}","arguments":"{huge}"}}}}]}}"#
        );
        let parsed = parse(&huge_call).map(|calls| {
            calls
                .iter()
                .map(|c| (c.name.len(), c.arguments.len()))
                .collect::<Vec<_>>()
        });
        assert_eq!(parsed, Ok(vec![(8 << 20, 8 << 20)]));

        let deep_arguments = format!(
            r#"{{"tool_calls":[{{"id":"c","function":{{"name":"x","arguments":{}1{}}}}}]}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        for input in [
            "[".repeat(100_000),
            deep_arguments,
            "null".to_owned(),
            "\"tool_calls\"".to_owned(),
            "{\"tool_calls\":[null,1,\"a\"]}".to_owned(),
            "{\"choices\":[{\"message\":{\"tool_calls\":[[[]]]}}]}".to_owned(),
            "\u{0}\u{feff}{}".to_owned(),
        ] {
            assert!(parse(&input).is_err(), "{}", &input[..input.len().min(80)]);
        }
    }

    #[test]
    fn renders_one_tool_message_per_result_then_one_user_message_with_every_image() {
        let chart = ["data:image/png;base64,AAAA".to_owned()];
        let photos = [
            "data:image/jpeg;base64,BBBB".to_owned(),
            "data:image/webp;base64,CCCC".to_owned(),
        ];
        let results = [
            result(
                "call_1",
                "get_weather",
                "[get_weather] 1 image(s) loaded",
                false,
                &chart,
            ),
            result(
                "call_2",
                "get_weather",
                "tool=get_weather failed: timeout\nnext: retry",
                true,
                &[],
            ),
            result(
                "call_3",
                "get_weather",
                "[get_weather] 2 image(s) loaded",
                false,
                &photos,
            ),
        ];
        assert_eq!(
            Value::Array(ChatCompletions.render_results(&results)),
            json!([
                {"role": "tool", "tool_call_id": "call_1", "content": "[get_weather] 1 image(s) loaded"},
                {"role": "tool", "tool_call_id": "call_2", "content": "tool=get_weather failed: timeout\nnext: retry"},
                {"role": "tool", "tool_call_id": "call_3", "content": "[get_weather] 2 image(s) loaded"},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,BBBB"}},
                    {"type": "image_url", "image_url": {"url": "data:image/webp;base64,CCCC"}},
                ]},
            ])
        );
    }

    #[test]
    fn renders_no_image_message_when_no_result_has_images_and_nothing_for_no_results() {
        let results = [result("c", "get_weather", "ok", false, &[])];
        assert_eq!(
            Value::Array(ChatCompletions.render_results(&results)),
            json!([{"role": "tool", "tool_call_id": "c", "content": "ok"}])
        );
        assert_eq!(ChatCompletions.render_results(&[]), Vec::<Value>::new());
    }

    #[test]
    fn answers_the_legacy_function_call_with_a_function_message() {
        let results = [unsent_result("get_weather", "sunny", false, &[])];
        assert_eq!(
            Value::Array(ChatCompletions.render_results(&results)),
            json!([{"role": "function", "name": "get_weather", "content": "sunny"}])
        );
    }

    #[test]
    fn an_id_spelled_like_the_legacy_field_is_an_ordinary_id() {
        let input = r#"{"tool_calls":[{"id":"function_call","type":"function","function":{"name":"x","arguments":"{}"}}]}"#;
        let calls = parse(input).unwrap_or_default();
        assert_eq!(
            Value::Array(ChatCompletions.render_results(&[answer(&calls[0], "ok")])),
            json!([{"role": "tool", "tool_call_id": "function_call", "content": "ok"}])
        );
    }

    #[test]
    fn ids_with_spaces_are_distinct_and_answered_as_sent() {
        let input = r#"{"tool_calls":[
            {"id":" a ","type":"function","function":{"name":" x ","arguments":"{}"}},
            {"id":"a","type":"function","function":{"name":"x","arguments":"{}"}}]}"#;
        let calls = parse(input).unwrap_or_default();
        assert_eq!(
            Value::Array(
                ChatCompletions.render_results(&[answer(&calls[0], "1"), answer(&calls[1], "2"),])
            ),
            json!([
                {"role": "tool", "tool_call_id": " a ", "content": "1"},
                {"role": "tool", "tool_call_id": "a", "content": "2"},
            ])
        );
    }

    #[test]
    fn renders_tools_as_function_entries() {
        let schema = json!({
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        });
        let empty = json!({"type": "object", "properties": {}});
        let tools = [
            ToolDecl {
                name: "get_weather",
                description: "Get current temperature for a given location.",
                parameters: &schema,
            },
            ToolDecl {
                name: "find_tools",
                description: "",
                parameters: &empty,
            },
        ];
        assert_eq!(
            Value::Array(ChatCompletions.render_tools(&tools)),
            json!([
                {"type": "function", "function": {
                    "name": "get_weather",
                    "description": "Get current temperature for a given location.",
                    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
                }},
                {"type": "function", "function": {
                    "name": "find_tools",
                    "description": "",
                    "parameters": {"type": "object", "properties": {}},
                }},
            ])
        );
    }

    #[test]
    fn rendered_results_answer_exactly_the_parsed_ids_in_order() {
        let calls = parse(PARALLEL).unwrap_or_default();
        let results: Vec<WireResult<'_>> = calls
            .iter()
            .map(|c| result(&c.id, "get_weather", "ok", false, &[]))
            .collect();
        let answered: Vec<Value> = ChatCompletions
            .render_results(&results)
            .iter()
            .map(|m| m["tool_call_id"].clone())
            .collect();
        assert_eq!(answered, [json!("call_12345xyz"), json!("call_67890abc")]);
    }
}
