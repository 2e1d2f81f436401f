//! OpenAI Responses: calls arrive as `function_call` items of the response's `output`, results
//! go back as one `function_call_output` input item each.

use serde_json::{Map, Value, json};

use super::{
    Provider, RawCall, ToolDecl, WireError, WireFormat, WireResult, distinct_ids, kind, parse_json,
    refuse_foreign, reply_error, sent_by, this_is,
};

const PROVIDER: Provider = Provider::OpenAiResponses;

/// The OpenAI Responses wire format.
pub struct Responses;

impl WireFormat for Responses {
    fn parse_reply(&self, input: &str) -> Result<Vec<RawCall>, WireError> {
        let reply = parse_json(input)?;
        refuse_foreign(PROVIDER, &reply)?;
        let items = output_items(&reply)?;
        let mut located = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Value::Object(item) = item else {
                return Err(fail(format!(
                    "output[{i}] must be an object, got {}",
                    kind(item)
                )));
            };
            match item.get("type") {
                Some(Value::String(t)) if t == "function_call" => {
                    located.push(function_call(i, item)?);
                }
                // A custom tool call also needs an answer in the next request, so dropping it
                // silently would make that request fail far from the cause.
                Some(Value::String(t)) if t == "custom_tool_call" => {
                    return Err(fail(format!(
                        "output[{i}] is a custom_tool_call; only function_call items can be dispatched"
                    )));
                }
                // Messages, reasoning and hosted-tool items are the API's business.
                Some(_) => {}
                None => return Err(untyped_item(i, item)),
            }
        }
        distinct_ids(PROVIDER, located)
    }

    fn render_results(&self, results: &[WireResult<'_>]) -> Vec<Value> {
        // The API has no error flag on outputs: a failure is told by the text itself.
        results
            .iter()
            .map(|r| {
                json!({
                    "type": "function_call_output",
                    // Every Responses call has a call_id; see anthropic.rs on `None`.
                    "call_id": r.tool_call_id.unwrap_or_default(),
                    "output": output(r),
                })
            })
            .collect()
    }

    fn render_tools(&self, tools: &[ToolDecl<'_>]) -> Vec<Value> {
        tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    // Strict mode would require every property in `required` and
                    // `additionalProperties: false` everywhere, which tool schemas do not promise.
                    "strict": false,
                })
            })
            .collect()
    }
}

fn fail(message: impl std::fmt::Display) -> WireError {
    reply_error(PROVIDER, message)
}

/// The `output` array of a whole response, or the array itself.
fn output_items(reply: &Value) -> Result<&Vec<Value>, WireError> {
    let message = match reply {
        Value::Array(items) => return Ok(items),
        Value::Object(message) => message,
        other => {
            return Err(fail(format!(
                "the reply must be a Responses API response or its output array, got {}",
                kind(other)
            )));
        }
    };
    match message.get("output") {
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(fail(format!(
            "output must be an array of items, got {}",
            kind(other)
        ))),
        // Another provider's reply was refused before this (`refuse_foreign`).
        None => Err(fail(
            "output is missing; expected a Responses API response or its output array",
        )),
    }
}

/// An output item without `type`: usually a message of another provider inside an array.
fn untyped_item(i: usize, item: &Map<String, Value>) -> WireError {
    match sent_by(&Value::Object(item.clone())) {
        Some(other) => fail(format!("output[{i}] has no type; {}", this_is(other))),
        None => fail(format!(
            "output[{i}] has no type; every output item needs a type"
        )),
    }
}

fn function_call(i: usize, item: &Map<String, Value>) -> Result<(String, RawCall), WireError> {
    let at = format!("output[{i}] (function_call)");
    let id = required_string(item, "call_id", &at)?;
    if id.is_empty() {
        return Err(fail(format!(
            "{at} has an empty call_id: the result could not refer to the call"
        )));
    }
    let name = required_string(item, "name", &at)?;
    let arguments = match item.get("arguments") {
        None | Some(Value::Null) => "{}".to_owned(),
        // Kept byte for byte: the engine reports invalid JSON to the model itself.
        Some(Value::String(s)) => s.clone(),
        // Compatible servers sometimes send the object itself.
        Some(other) => other.to_string(),
    };
    let call = RawCall::new(id, name, arguments);
    Ok((at, call))
}

fn required_string<'v>(
    item: &'v Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<&'v str, WireError> {
    match item.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(fail(format!("{at} has no {key}"))),
        Some(other) => Err(fail(format!(
            "{at} {key} must be a string, got {}",
            kind(other)
        ))),
    }
}

/// The result text, or content parts when the result carries images.
fn output(result: &WireResult<'_>) -> Value {
    if result.images.is_empty() {
        return Value::from(result.content);
    }
    // An empty input_text part carries nothing, so an image-only result sends images alone.
    let text =
        (!result.content.is_empty()).then(|| json!({"type": "input_text", "text": result.content}));
    let images = result
        .images
        .iter()
        .map(|url| json!({"type": "input_image", "image_url": url}));
    Value::Array(text.into_iter().chain(images).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_calls::{call, error, result};
    use pretty_assertions::assert_eq;

    fn parse(input: &str) -> Result<Vec<RawCall>, WireError> {
        Responses.parse_reply(input)
    }

    /// A whole response as the Responses API documents it: reasoning, then two parallel calls.
    const PARALLEL: &str = r#"{
        "id": "resp_67ccd2bed1ec8190b14f964abc054267",
        "object": "response",
        "created_at": 1741476542,
        "status": "completed",
        "model": "gpt-4.1-2025-04-14",
        "output": [
            {"type": "reasoning", "id": "rs_6806bfca0b2481918a5748308061a260", "summary": []},
            {"type": "function_call", "id": "fc_12345xyz", "call_id": "call_12345xyz",
             "name": "get_weather", "arguments": "{\"location\":\"Paris, France\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_67890abc", "call_id": "call_67890abc",
             "name": "get_weather", "arguments": "{\"location\":\"Bogot\\u00e1, Colombia\"}", "status": "completed"}
        ],
        "parallel_tool_calls": true,
        "usage": {"input_tokens": 291, "output_tokens": 23, "total_tokens": 314}
    }"#;

    #[test]
    fn parses_parallel_calls_of_a_whole_response_keeping_call_ids_and_argument_bytes() {
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
    fn parses_the_output_array_itself_skipping_messages() {
        let input = r#"[
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_1", "name": "x", "arguments": "{ \"a\" : 1 }"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"}
        ]"#;
        assert_eq!(
            parse(input),
            Ok(vec![call("call_1", "x", r#"{ "a" : 1 }"#)])
        );
    }

    #[test]
    fn keeps_invalid_argument_json_and_serialises_object_or_absent_arguments() {
        let input = r#"{"output":[
            {"type":"function_call","call_id":"c1","name":"a","arguments":"{\"unclosed\": "},
            {"type":"function_call","call_id":"c2","name":"b","arguments":{"z":1,"a":"é"}},
            {"type":"function_call","call_id":"c3","name":"c"},
            {"type":"function_call","call_id":"c4","name":"d","arguments":null}
        ]}"#;
        assert_eq!(
            parse(input),
            Ok(vec![
                call("c1", "a", r#"{"unclosed": "#),
                call("c2", "b", r#"{"a":"é","z":1}"#),
                call("c3", "c", "{}"),
                call("c4", "d", "{}"),
            ])
        );
    }

    #[test]
    fn a_reply_without_function_calls_has_no_calls() {
        for input in [
            "[]",
            r#"{"output":[]}"#,
            r#"{"object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]}]}"#,
        ] {
            assert_eq!(parse(input), Ok(vec![]), "{input}");
        }
    }

    #[test]
    fn names_the_missing_or_mistyped_field() {
        let cases = [
            (
                r#"{"output":[{"type":"function_call","call_id":"a","name":"x"},{"type":"function_call","name":"y","arguments":"{}"}]}"#,
                "openai-responses: output[1] (function_call) has no call_id",
            ),
            (
                r#"[{"type":"function_call","call_id":"a","arguments":"{}"}]"#,
                "openai-responses: output[0] (function_call) has no name",
            ),
            (
                r#"[{"type":"function_call","call_id":"","name":"x"}]"#,
                "openai-responses: output[0] (function_call) has an empty call_id: the result could not refer to the call",
            ),
            (
                r#"[{"type":"function_call","call_id":7,"name":"x"}]"#,
                "openai-responses: output[0] (function_call) call_id must be a string, got a number",
            ),
            (
                r#"[{"type":"function_call","call_id":"a","name":["x"]}]"#,
                "openai-responses: output[0] (function_call) name must be a string, got an array",
            ),
            (
                r#"[{"type":"custom_tool_call","call_id":"a","name":"x","input":"y"}]"#,
                "openai-responses: output[0] is a custom_tool_call; only function_call items can be dispatched",
            ),
            (
                r#"[true]"#,
                "openai-responses: output[0] must be an object, got a boolean",
            ),
            (
                r#"[{"call_id":"a","name":"x"}]"#,
                "openai-responses: output[0] has no type; every output item needs a type",
            ),
            (
                r#"{"output":{"type":"function_call"}}"#,
                "openai-responses: output must be an array of items, got an object",
            ),
            (
                r#"{"object":"response","status":"completed"}"#,
                "openai-responses: output is missing; expected a Responses API response or its output array",
            ),
            (
                r#""output""#,
                "openai-responses: the reply must be a Responses API response or its output array, got a string",
            ),
            (
                "{\"output\":[",
                "the reply is not valid JSON: EOF while parsing a list at line 1 column 11",
            ),
            ("", "the reply is empty: send the assistant message as JSON"),
        ];
        for (input, message) in cases {
            assert_eq!(parse(input), error(message), "{input}");
        }
    }

    #[test]
    fn points_other_providers_replies_to_their_provider() {
        let cases = [
            (
                r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"x","arguments":"{}"}}]}"#,
                "openai-responses: this is an OpenAI Chat Completions reply (tool_calls, function_call or choices); send it with provider openai",
            ),
            (
                r#"{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}"#,
                "openai-responses: this is an OpenAI Chat Completions reply (tool_calls, function_call or choices); send it with provider openai",
            ),
            (
                r#"{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"x","input":{}}]}"#,
                "openai-responses: this is an Anthropic Messages reply (tool_use blocks); send it with provider anthropic",
            ),
            (
                r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"x","args":{}}}]}}]}"#,
                "openai-responses: this is a Gemini reply (candidates or parts); send it with provider gemini",
            ),
            (
                r#"[{"role":"assistant","tool_calls":[]}]"#,
                "openai-responses: output[0] has no type; this is an OpenAI Chat Completions reply (tool_calls, function_call or choices); send it with provider openai",
            ),
        ];
        for (input, message) in cases {
            assert_eq!(parse(input), error(message), "{input}");
        }
    }

    #[test]
    fn rejects_repeated_call_ids() {
        let input = r#"[
            {"type":"function_call","call_id":"call_1","name":"a","arguments":"{}"},
            {"type":"function_call","call_id":"call_1","name":"b","arguments":"{}"}
        ]"#;
        assert_eq!(
            parse(input),
            error(
                r#"openai-responses: output[1] (function_call) has id "call_1", already used by output[0] (function_call); every call needs its own id"#
            )
        );
    }

    #[test]
    fn hostile_inputs_are_errors_never_panics() {
        let deep_arguments = format!(
            r#"[{{"type":"function_call","call_id":"c","name":"x","arguments":{}1{}}}]"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        for input in [
            "[".repeat(100_000),
            "{\"output\":".repeat(100_000),
            deep_arguments,
            "null".to_owned(),
            "[null,1,\"a\"]".to_owned(),
            "[{\"type\":\"function_call\",\"call_id\":{},\"name\":{}}]".to_owned(),
            "\u{0}\u{feff}[]".to_owned(),
        ] {
            assert!(parse(&input).is_err(), "{}", &input[..input.len().min(80)]);
        }
        let huge = "x".repeat(8 << 20);
        let input = format!(
            r#"[{{"type":"function_call","call_id":"c","name":"{huge}","arguments":"{huge}"}}]"#
        );
        let lengths = parse(&input).map(|calls| {
            calls
                .iter()
                .map(|c| (c.name.len(), c.arguments.len()))
                .collect::<Vec<_>>()
        });
        assert_eq!(lengths, Ok(vec![(8 << 20, 8 << 20)]));
    }

    #[test]
    fn renders_one_function_call_output_per_result_with_images_as_content_parts() {
        let chart = ["data:image/png;base64,iVBORw0KGgo=".to_owned()];
        let only_images = [
            "data:image/jpeg;base64,/9j/4AAQ".to_owned(),
            "https://example.com/chart.gif".to_owned(),
        ];
        let results = [
            result("call_1", "get_weather", "15 degrees", false, &[]),
            result(
                "call_2",
                "get_weather",
                "tool=get_weather failed: city not found\nnext: check the spelling",
                true,
                &[],
            ),
            result(
                "call_3",
                "get_weather",
                "[get_weather] 1 image(s) loaded",
                false,
                &chart,
            ),
            result("call_4", "get_weather", "", false, &only_images),
        ];
        assert_eq!(
            Value::Array(Responses.render_results(&results)),
            json!([
                {"type": "function_call_output", "call_id": "call_1", "output": "15 degrees"},
                {"type": "function_call_output", "call_id": "call_2",
                 "output": "tool=get_weather failed: city not found\nnext: check the spelling"},
                {"type": "function_call_output", "call_id": "call_3", "output": [
                    {"type": "input_text", "text": "[get_weather] 1 image(s) loaded"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
                ]},
                {"type": "function_call_output", "call_id": "call_4", "output": [
                    {"type": "input_image", "image_url": "data:image/jpeg;base64,/9j/4AAQ"},
                    {"type": "input_image", "image_url": "https://example.com/chart.gif"},
                ]},
            ])
        );
        assert_eq!(Responses.render_results(&[]), Vec::<Value>::new());
    }

    #[test]
    fn renders_tools_flat_and_not_strict() {
        let schema = json!({
            "type": "object",
            "properties": {"location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}},
            "required": ["location"],
            "additionalProperties": false,
        });
        let tools = [ToolDecl {
            name: "get_weather",
            description: "Get current temperature for a given location.",
            parameters: &schema,
        }];
        assert_eq!(
            Value::Array(Responses.render_tools(&tools)),
            json!([{
                "type": "function",
                "name": "get_weather",
                "description": "Get current temperature for a given location.",
                "parameters": {
                    "type": "object",
                    "properties": {"location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"}},
                    "required": ["location"],
                    "additionalProperties": false,
                },
                "strict": false,
            }])
        );
    }

    #[test]
    fn rendered_results_answer_exactly_the_parsed_ids_in_order() {
        let calls = parse(PARALLEL).unwrap_or_default();
        let results: Vec<WireResult<'_>> = calls
            .iter()
            .map(|c| result(&c.id, "get_weather", "ok", false, &[]))
            .collect();
        assert_eq!(
            Value::Array(Responses.render_results(&results)),
            json!([
                {"type": "function_call_output", "call_id": "call_12345xyz", "output": "ok"},
                {"type": "function_call_output", "call_id": "call_67890abc", "output": "ok"},
            ])
        );
    }
}
