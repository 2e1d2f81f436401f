//! Anthropic Messages: calls arrive as `tool_use` content blocks, results go back as
//! `tool_result` blocks of one user message.

use serde_json::{Map, Value, json};

use super::{
    Provider, RawCall, ToolDecl, WireError, WireFormat, WireResult, distinct_ids, kind, parse_json,
    refuse_foreign, reply_error, split_data_url,
};

const PROVIDER: Provider = Provider::Anthropic;

/// The Anthropic Messages wire format.
pub struct Messages;

impl WireFormat for Messages {
    fn parse_reply(&self, input: &str) -> Result<Vec<RawCall>, WireError> {
        let reply = parse_json(input)?;
        refuse_foreign(PROVIDER, &reply)?;
        // The assistant message and a whole Messages API response both carry `content`.
        let Value::Object(message) = &reply else {
            return Err(fail(format!(
                "the reply must be an object (the assistant message or a Messages API response), got {}",
                kind(&reply)
            )));
        };
        let blocks = match message.get("content") {
            Some(Value::Array(blocks)) => blocks,
            // String content is plain text: a reply without tool calls.
            Some(Value::String(_)) => return Ok(Vec::new()),
            Some(other) => {
                return Err(fail(format!(
                    "content must be an array of blocks or a string, got {}",
                    kind(other)
                )));
            }
            None => return Err(missing_content()),
        };
        let mut located = Vec::new();
        for (i, block) in blocks.iter().enumerate() {
            let Value::Object(block) = block else {
                return Err(fail(format!(
                    "content[{i}] must be an object, got {}",
                    kind(block)
                )));
            };
            // Text, thinking and server-tool blocks are the API's business, not calls to run.
            if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                located.push(tool_use(i, block)?);
            }
        }
        distinct_ids(PROVIDER, located)
    }

    fn render_results(&self, results: &[WireResult<'_>]) -> Vec<Value> {
        if results.is_empty() {
            return Vec::new();
        }
        // The API wants every result of a turn in one user message, in call order.
        let blocks: Vec<Value> = results.iter().map(tool_result).collect();
        vec![json!({"role": "user", "content": blocks})]
    }

    fn render_tools(&self, tools: &[ToolDecl<'_>]) -> Vec<Value> {
        tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.parameters,
                })
            })
            .collect()
    }
}

fn fail(message: impl std::fmt::Display) -> WireError {
    reply_error(PROVIDER, message)
}

/// Another provider's reply was refused before this (`refuse_foreign`).
fn missing_content() -> WireError {
    fail("content is missing; expected the assistant message or a Messages API response")
}

fn tool_use(i: usize, block: &Map<String, Value>) -> Result<(String, RawCall), WireError> {
    let at = format!("content[{i}] (tool_use)");
    let id = required_string(block, "id", &at)?;
    if id.is_empty() {
        return Err(fail(format!(
            "{at} has an empty id: the result could not refer to the call"
        )));
    }
    let name = required_string(block, "name", &at)?;
    let arguments = match block.get("input") {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(input) => input.to_string(),
    };
    let call = RawCall::new(id, name, arguments);
    Ok((at, call))
}

fn required_string<'v>(
    block: &'v Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<&'v str, WireError> {
    match block.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(fail(format!("{at} has no {key}"))),
        Some(other) => Err(fail(format!(
            "{at} {key} must be a string, got {}",
            kind(other)
        ))),
    }
}

fn tool_result(result: &WireResult<'_>) -> Value {
    let content = if result.images.is_empty() {
        Value::from(result.content)
    } else {
        // The API rejects empty text blocks, so an image-only result carries images alone.
        let text =
            (!result.content.is_empty()).then(|| json!({"type": "text", "text": result.content}));
        Value::Array(
            text.into_iter()
                .chain(result.images.iter().map(|url| image(url)))
                .collect(),
        )
    };
    let mut block = Map::new();
    block.insert("type".to_owned(), "tool_result".into());
    // Anthropic sends an id with every call; `None` only comes from a caller that built calls
    // without one, and an empty id is the API's own error to report.
    block.insert(
        "tool_use_id".to_owned(),
        result.tool_call_id.unwrap_or_default().into(),
    );
    block.insert("content".to_owned(), content);
    if result.is_error {
        block.insert("is_error".to_owned(), true.into());
    }
    Value::Object(block)
}

/// A base64 image block; anything that is not a base64 data URL goes as a URL source, which the
/// API fetches itself.
fn image(url: &str) -> Value {
    match split_data_url(url) {
        Some((media_type, data)) => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }),
        None => json!({"type": "image", "source": {"type": "url", "url": url}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_calls::{call, error, result};
    use pretty_assertions::assert_eq;

    fn parse(input: &str) -> Result<Vec<RawCall>, WireError> {
        Messages.parse_reply(input)
    }

    /// Anthropic's parallel tool use example: text, then two tool_use blocks.
    const PARALLEL: &str = r#"{
        "role": "assistant",
        "content": [
            {"type": "text", "text": "I'll check the weather and time in San Francisco."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather",
             "input": {"location": "San Francisco, CA"}},
            {"type": "tool_use", "id": "toolu_02", "name": "get_time",
             "input": {"timezone": "America/Los_Angeles"}}
        ]
    }"#;

    #[test]
    fn parses_a_single_tool_use_from_the_assistant_message() {
        let input = r#"{"role":"assistant","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"location":"SF"}}]}"#;
        assert_eq!(
            parse(input),
            Ok(vec![call(
                "toolu_01",
                "get_weather",
                r#"{"location":"SF"}"#
            )])
        );
    }

    #[test]
    fn parses_parallel_tool_uses_in_order_keeping_ids() {
        assert_eq!(
            parse(PARALLEL),
            Ok(vec![
                call(
                    "toolu_01",
                    "get_weather",
                    r#"{"location":"San Francisco, CA"}"#
                ),
                call(
                    "toolu_02",
                    "get_time",
                    r#"{"timezone":"America/Los_Angeles"}"#
                ),
            ])
        );
    }

    #[test]
    fn parses_a_whole_messages_api_response() {
        let input = r#"{
            "id": "msg_01Aq9w938a90dw8q",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQB"},
                {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                 "input": {"location": "San Francisco, CA", "unit": "celsius"}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {"input_tokens": 472, "output_tokens": 91}
        }"#;
        assert_eq!(
            parse(input),
            Ok(vec![call(
                "toolu_01A09q90qw90lq917835lq9",
                "get_weather",
                r#"{"location":"San Francisco, CA","unit":"celsius"}"#
            )])
        );
    }

    #[test]
    fn input_is_serialised_and_absent_input_is_an_empty_object() {
        let input = r#"{"content":[
            {"type":"tool_use","id":"a","name":"x","input":{"n":1.5,"s":"é\n","l":[null,true]}},
            {"type":"tool_use","id":"b","name":"y"},
            {"type":"tool_use","id":"c","name":"z","input":"not an object"}
        ]}"#;
        assert_eq!(
            parse(input),
            Ok(vec![
                call("a", "x", r#"{"l":[null,true],"n":1.5,"s":"é\n"}"#),
                call("b", "y", "{}"),
                call("c", "z", r#""not an object""#),
            ])
        );
    }

    #[test]
    fn a_reply_without_tool_use_has_no_calls() {
        for input in [
            r#"{"role":"assistant","content":"Hello!"}"#,
            r#"{"role":"assistant","content":[]}"#,
            r#"{"type":"message","role":"assistant","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn"}"#,
            r#"{"content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"x"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}]}"#,
        ] {
            assert_eq!(parse(input), Ok(vec![]), "{input}");
        }
    }

    #[test]
    fn names_the_missing_or_mistyped_field() {
        let cases = [
            (
                r#"{"content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t1","name":"x","input":{}},{"type":"tool_use","name":"y","input":{}}]}"#,
                "anthropic: content[2] (tool_use) has no id",
            ),
            (
                r#"{"content":[{"type":"tool_use","id":"t1","input":{}}]}"#,
                "anthropic: content[0] (tool_use) has no name",
            ),
            (
                r#"{"content":[{"type":"tool_use","id":"","name":"x"}]}"#,
                "anthropic: content[0] (tool_use) has an empty id: the result could not refer to the call",
            ),
            (
                r#"{"content":[{"type":"tool_use","id":["t"],"name":"x"}]}"#,
                "anthropic: content[0] (tool_use) id must be a string, got an array",
            ),
            (
                r#"{"content":[{"type":"tool_use","id":"t","name":false}]}"#,
                "anthropic: content[0] (tool_use) name must be a string, got a boolean",
            ),
            (
                r#"{"content":["hello"]}"#,
                "anthropic: content[0] must be an object, got a string",
            ),
            (
                r#"{"content":null}"#,
                "anthropic: content must be an array of blocks or a string, got null",
            ),
            (
                r#"{"role":"assistant"}"#,
                "anthropic: content is missing; expected the assistant message or a Messages API response",
            ),
            (
                r#"{"role":"assistant","tool_calls":[]}"#,
                "anthropic: this is an OpenAI Chat Completions reply (tool_calls, function_call or choices); send it with provider openai",
            ),
            (
                r#""hello""#,
                "anthropic: the reply must be an object (the assistant message or a Messages API response), got a string",
            ),
            (
                r#"{"content":[{"type":"tool_use","id":"t","name":"a"},{"type":"tool_use","id":"t","name":"b"}]}"#,
                r#"anthropic: content[1] (tool_use) has id "t", already used by content[0] (tool_use); every call needs its own id"#,
            ),
            (
                "{\"content\":[",
                "the reply is not valid JSON: EOF while parsing a list at line 1 column 12",
            ),
        ];
        for (input, message) in cases {
            assert_eq!(parse(input), error(message), "{input}");
        }
    }

    #[test]
    fn hostile_inputs_are_errors_never_panics() {
        let deep_input = format!(
            r#"{{"content":[{{"type":"tool_use","id":"t","name":"x","input":{}}}]}}"#,
            "{\"a\":".repeat(50_000)
        );
        for input in [
            "[".repeat(100_000),
            "{\"content\":".repeat(100_000),
            deep_input,
            "{\"content\":[[],{},1]}".to_owned(),
            "\u{feff}".to_owned(),
            "{\"content\":[{\"type\":\"tool_use\",\"id\":{},\"name\":{}}]}".to_owned(),
        ] {
            assert!(parse(&input).is_err(), "{}", &input[..input.len().min(80)]);
        }
        let huge = "é".repeat(4 << 20);
        let input = format!(
            r#"{{"content":[{{"type":"tool_use","id":"t","name":"x","input":"{huge}"}}]}}"#
        );
        let lengths = parse(&input).map(|calls| calls.iter().map(|c| c.arguments.len()).collect());
        assert_eq!(lengths, Ok(vec![huge.len() + 2]));
    }

    #[test]
    fn renders_every_result_as_a_tool_result_block_of_one_user_message() {
        let screenshot = ["data:image/png;base64,iVBORw0KGgo=".to_owned()];
        let only_image = [
            "data:image/jpeg;base64,/9j/4AAQ".to_owned(),
            "https://example.com/chart.gif".to_owned(),
        ];
        let results = [
            result("toolu_01", "get_weather", "15 degrees", false, &[]),
            result(
                "toolu_02",
                "get_weather",
                "tool=get_weather failed: city not found",
                true,
                &[],
            ),
            result(
                "toolu_03",
                "get_weather",
                "[get_weather] 1 image(s) loaded",
                false,
                &screenshot,
            ),
            result("toolu_04", "get_weather", "", true, &only_image),
        ];
        assert_eq!(
            Value::Array(Messages.render_results(&results)),
            json!([{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "15 degrees"},
                {"type": "tool_result", "tool_use_id": "toolu_02",
                 "content": "tool=get_weather failed: city not found", "is_error": true},
                {"type": "tool_result", "tool_use_id": "toolu_03", "content": [
                    {"type": "text", "text": "[get_weather] 1 image(s) loaded"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ]},
                {"type": "tool_result", "tool_use_id": "toolu_04", "is_error": true, "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/chart.gif"}},
                ]},
            ]}])
        );
    }

    #[test]
    fn renders_nothing_for_no_results() {
        assert_eq!(Messages.render_results(&[]), Vec::<Value>::new());
    }

    #[test]
    fn renders_tools_with_input_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"location": {"type": "string", "description": "The city and state"}},
            "required": ["location"],
        });
        let tools = [ToolDecl {
            name: "get_weather",
            description: "Get the current weather in a given location",
            parameters: &schema,
        }];
        assert_eq!(
            Value::Array(Messages.render_tools(&tools)),
            json!([{
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "input_schema": {
                    "type": "object",
                    "properties": {"location": {"type": "string", "description": "The city and state"}},
                    "required": ["location"],
                },
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
        let messages = Messages.render_results(&results);
        let answered: Vec<Value> = messages[0]["content"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|block| block["tool_use_id"].clone())
            .collect();
        assert_eq!(messages.len(), 1);
        assert_eq!(answered, [json!("toolu_01"), json!("toolu_02")]);
    }
}
