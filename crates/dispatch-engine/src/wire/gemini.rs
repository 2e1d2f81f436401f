//! Gemini (generateContent): calls arrive as `functionCall` parts of the model's Content, results
//! go back as `functionResponse` parts of one user Content.
//!
//! Gemini may omit a call's `id`; such calls are named `call_<n>` for events and reports (n
//! counting the reply's function calls from 1), and their results go back without an `id`,
//! matched by name and order as Gemini does for id-less calls.

use serde_json::{Map, Value, json};

use super::{
    Provider, RawCall, ToolDecl, WireError, WireFormat, WireResult, distinct_ids, kind, parse_json,
    refuse_foreign, reply_error, split_data_url,
};

const PROVIDER: Provider = Provider::Gemini;

/// Schema keywords Gemini's OpenAPI subset rejects.
const REJECTED_KEYWORDS: [&str; 4] = ["additionalProperties", "$schema", "default", "examples"];

/// Keywords whose value maps names to schemas, so the names themselves are never stripped.
const SCHEMA_MAPS: [&str; 4] = ["properties", "$defs", "definitions", "patternProperties"];

/// The Gemini generateContent wire format.
pub struct GenerateContent;

impl WireFormat for GenerateContent {
    fn parse_reply(&self, input: &str) -> Result<Vec<RawCall>, WireError> {
        let reply = parse_json(input)?;
        refuse_foreign(PROVIDER, &reply)?;
        let Some(parts) = model_parts(&reply)? else {
            return Ok(Vec::new());
        };
        let mut located = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let Value::Object(part) = part else {
                return Err(fail(format!(
                    "parts[{i}] must be an object, got {}",
                    kind(part)
                )));
            };
            // Text, thought and executable-code parts are the model's business, not calls.
            if let Some(call) = part.get("functionCall") {
                located.push(function_call(i, call)?);
            }
        }
        distinct_ids(PROVIDER, located)
    }

    fn render_results(&self, results: &[WireResult<'_>]) -> Vec<Value> {
        if results.is_empty() {
            return Vec::new();
        }
        // Gemini wants every response of a turn in one Content, in call order; a function
        // response carries no images, so they follow as inline parts of the same Content.
        let responses = results.iter().map(function_response);
        let images = results.iter().flat_map(|r| r.images).map(|url| image(url));
        let parts: Vec<Value> = responses.chain(images).collect();
        vec![json!({"role": "user", "parts": parts})]
    }

    fn render_tools(&self, tools: &[ToolDecl<'_>]) -> Vec<Value> {
        if tools.is_empty() {
            return Vec::new();
        }
        // The request's `tools` holds one Tool whose functionDeclarations list every function.
        let declarations: Vec<Value> = tools.iter().map(declaration).collect();
        vec![json!({"functionDeclarations": declarations})]
    }
}

fn fail(message: impl std::fmt::Display) -> WireError {
    reply_error(PROVIDER, message)
}

/// The parts of the first candidate's Content, or of the Content itself; `None` when a candidate
/// has content without parts (Gemini sends that for an empty turn).
fn model_parts(reply: &Value) -> Result<Option<&Vec<Value>>, WireError> {
    let Value::Object(reply) = reply else {
        return Err(fail(format!(
            "the reply must be an object (a generateContent response or a Content), got {}",
            kind(reply)
        )));
    };
    if let Some(candidates) = reply.get("candidates") {
        return candidate_parts(reply, candidates);
    }
    if reply.contains_key("parts") {
        return content_parts(reply, "").map(Some);
    }
    // A single candidate (`{"content": {...}, "finishReason": ...}`) holds the Content.
    if let Some(Value::Object(content)) = reply.get("content") {
        return optional_parts(content, "content.");
    }
    // Another provider's reply was refused before this (`refuse_foreign`).
    Err(fail(
        "parts is missing; expected a generateContent response or a Content",
    ))
}

fn candidate_parts<'v>(
    reply: &'v Map<String, Value>,
    candidates: &'v Value,
) -> Result<Option<&'v Vec<Value>>, WireError> {
    let Value::Array(candidates) = candidates else {
        return Err(fail(format!(
            "candidates must be an array, got {}",
            kind(candidates)
        )));
    };
    let Some(candidate) = candidates.first() else {
        // A blocked prompt yields no candidate; the reason says why.
        let reason = reply
            .get("promptFeedback")
            .and_then(|f| f.get("blockReason"))
            .and_then(Value::as_str)
            .map(|r| format!(" (promptFeedback.blockReason {r:?})"))
            .unwrap_or_default();
        return Err(fail(format!(
            "candidates is empty{reason}: the response carries no content"
        )));
    };
    let Value::Object(candidate) = candidate else {
        return Err(fail(format!(
            "candidates[0] must be an object, got {}",
            kind(candidate)
        )));
    };
    match candidate.get("content") {
        Some(Value::Object(content)) => optional_parts(content, "candidates[0].content."),
        None | Some(Value::Null) => {
            let reason = candidate
                .get("finishReason")
                .and_then(Value::as_str)
                .map(|r| format!(" (finishReason {r:?})"))
                .unwrap_or_default();
            Err(fail(format!(
                "candidates[0] has no content{reason}: the response carries no calls"
            )))
        }
        Some(other) => Err(fail(format!(
            "candidates[0].content must be an object, got {}",
            kind(other)
        ))),
    }
}

fn optional_parts<'v>(
    content: &'v Map<String, Value>,
    at: &str,
) -> Result<Option<&'v Vec<Value>>, WireError> {
    match content.get("parts") {
        None | Some(Value::Null) => Ok(None),
        Some(_) => content_parts(content, at).map(Some),
    }
}

fn content_parts<'v>(
    content: &'v Map<String, Value>,
    at: &str,
) -> Result<&'v Vec<Value>, WireError> {
    match content.get("parts") {
        Some(Value::Array(parts)) => Ok(parts),
        Some(other) => Err(fail(format!(
            "{at}parts must be an array, got {}",
            kind(other)
        ))),
        None => Err(fail(format!("{at}parts is missing"))),
    }
}

fn function_call(i: usize, call: &Value) -> Result<(String, RawCall), WireError> {
    let at = format!("parts[{i}] (functionCall)");
    let Value::Object(call) = call else {
        return Err(fail(format!("{at} must be an object, got {}", kind(call))));
    };
    let name = match call.get("name") {
        Some(Value::String(name)) => name,
        None | Some(Value::Null) => return Err(fail(format!("{at} has no name"))),
        Some(other) => {
            return Err(fail(format!(
                "{at} name must be a string, got {}",
                kind(other)
            )));
        }
    };
    let id = match call.get("id") {
        Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
        // Named by `distinct_ids` once every sent id is known.
        None | Some(Value::Null) => None,
        Some(Value::String(_)) => {
            return Err(fail(format!(
                "{at} has an empty id: the result could not refer to the call; omit it or send a real one"
            )));
        }
        Some(other) => {
            return Err(fail(format!(
                "{at} id must be a string, got {}",
                kind(other)
            )));
        }
    };
    let arguments = match call.get("args") {
        None | Some(Value::Null) => "{}".to_owned(),
        // Gemini sends an object; anything else is passed on for the engine to reject.
        Some(args) => args.to_string(),
    };
    let call = match id {
        Some(id) => RawCall::new(id, name.clone(), arguments),
        None => RawCall::made_up(String::new(), name.clone(), arguments),
    };
    Ok((at, call))
}

fn function_response(result: &WireResult<'_>) -> Value {
    // Gemini requires `response` to be an object; `error` is the key it documents for failures.
    let key = if result.is_error { "error" } else { "output" };
    let mut response = Map::new();
    response.insert("name".to_owned(), result.name.into());
    if let Some(id) = result.tool_call_id {
        response.insert("id".to_owned(), id.into());
    }
    response.insert("response".to_owned(), json!({ key: result.content }));
    json!({"functionResponse": response})
}

/// An inline image part; anything that is not a base64 data URL goes as a file URI.
fn image(url: &str) -> Value {
    match split_data_url(url) {
        Some((mime_type, data)) => json!({"inlineData": {"mimeType": mime_type, "data": data}}),
        None => json!({"fileData": {"fileUri": url}}),
    }
}

fn declaration(tool: &ToolDecl<'_>) -> Value {
    let mut declaration = Map::new();
    declaration.insert("name".to_owned(), tool.name.into());
    declaration.insert("description".to_owned(), tool.description.into());
    let parameters = gemini_schema(tool.parameters);
    // Gemini rejects an object schema without properties; a tool without arguments omits
    // `parameters` instead.
    let no_arguments = parameters
        .get("properties")
        .is_none_or(|p| p.as_object().is_some_and(Map::is_empty));
    if !no_arguments {
        declaration.insert("parameters".to_owned(), parameters);
    }
    Value::Object(declaration)
}

/// The schema in Gemini's OpenAPI subset: rejected keywords are dropped at every level, `format`
/// is kept only for `enum` and `date-time`, an empty `properties` is dropped, and a
/// `["T", "null"]` type becomes `T` with `nullable: true` (with `null` removed from its `enum`).
fn gemini_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(gemini_schema_object(map)),
        Value::Array(items) => Value::Array(items.iter().map(gemini_schema).collect()),
        other => other.clone(),
    }
}

fn gemini_schema_object(map: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in map {
        let key = key.as_str();
        if REJECTED_KEYWORDS.contains(&key) {
            continue;
        }
        let converted = match (key, value) {
            ("format", Value::String(f)) if f == "enum" || f == "date-time" => value.clone(),
            ("format", _) => continue,
            ("type", Value::Array(types)) => {
                let concrete: Vec<&Value> = types
                    .iter()
                    .filter(|t| t.as_str() != Some("null"))
                    .collect();
                let nullable = concrete.len() < types.len();
                if nullable {
                    out.insert("nullable".to_owned(), true.into());
                }
                match concrete.as_slice() {
                    [single] => (*single).clone(),
                    // Several concrete types have no Gemini equivalent; sent as given.
                    _ => Value::Array(concrete.into_iter().cloned().collect()),
                }
            }
            ("enum", Value::Array(values)) => {
                Value::Array(values.iter().filter(|v| !v.is_null()).cloned().collect())
            }
            // Literal values, not schemas.
            ("const" | "required", _) => value.clone(),
            // Gemini rejects an empty `properties`; without it an object takes any keys.
            ("properties", Value::Object(names)) if names.is_empty() => continue,
            (k, Value::Object(names)) if SCHEMA_MAPS.contains(&k) => Value::Object(
                names
                    .iter()
                    .map(|(name, schema)| (name.clone(), gemini_schema(schema)))
                    .collect(),
            ),
            _ => gemini_schema(value),
        };
        out.insert(key.to_owned(), converted);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::test_calls::{answer, call, error, result, unsent, unsent_result};
    use pretty_assertions::assert_eq;

    fn parse(input: &str) -> Result<Vec<RawCall>, WireError> {
        GenerateContent.parse_reply(input)
    }

    /// Gemini's parallel function calling example: three calls in one Content, without ids.
    const PARALLEL: &str = r#"{
        "candidates": [{
            "content": {
                "parts": [
                    {"functionCall": {"name": "power_disco_ball", "args": {"power": true}},
                     "thoughtSignature": "CiQBcsjafN"},
                    {"functionCall": {"name": "start_music", "args": {"energetic": true, "loud": true}}},
                    {"functionCall": {"name": "dim_lights", "args": {"brightness": 0.5}}}
                ],
                "role": "model"
            },
            "finishReason": "STOP",
            "index": 0
        }],
        "usageMetadata": {"promptTokenCount": 180, "candidatesTokenCount": 34, "totalTokenCount": 214},
        "modelVersion": "gemini-2.5-flash"
    }"#;

    #[test]
    fn parses_parallel_calls_without_ids_giving_them_ids_in_part_order() {
        assert_eq!(
            parse(PARALLEL),
            Ok(vec![
                unsent("call_1", "power_disco_ball", r#"{"power":true}"#),
                unsent("call_2", "start_music", r#"{"energetic":true,"loud":true}"#),
                unsent("call_3", "dim_lights", r#"{"brightness":0.5}"#),
            ])
        );
    }

    #[test]
    fn parses_a_single_content_keeping_ids_and_skipping_text_parts() {
        let input = r#"{"role": "model", "parts": [
            {"text": "Let me check the weather."},
            {"functionCall": {"id": "fc-8a1b", "name": "get_weather", "args": {"location": "Bogotá", "unit": "celsius"}}},
            {"thought": true, "text": "Also the time."},
            {"functionCall": {"name": "get_time"}}
        ]}"#;
        assert_eq!(
            parse(input),
            Ok(vec![
                call(
                    "fc-8a1b",
                    "get_weather",
                    r#"{"location":"Bogotá","unit":"celsius"}"#
                ),
                // The second function call of the reply, so n is 2 although it is parts[3].
                unsent("call_2", "get_time", "{}"),
            ])
        );
    }

    #[test]
    fn parses_a_single_candidate() {
        let input = r#"{"content":{"role":"model","parts":[{"functionCall":{"name":"x","args":{"a":[1]}}}]},"finishReason":"STOP"}"#;
        assert_eq!(
            parse(input),
            Ok(vec![unsent("call_1", "x", r#"{"a":[1]}"#)])
        );
    }

    #[test]
    fn a_reply_without_function_calls_has_no_calls() {
        for input in [
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Done."}]},"finishReason":"STOP"}]}"#,
            r#"{"candidates":[{"content":{"role":"model"},"finishReason":"MAX_TOKENS"}]}"#,
            r#"{"role":"model","parts":[]}"#,
        ] {
            assert_eq!(parse(input), Ok(vec![]), "{input}");
        }
    }

    #[test]
    fn names_the_missing_or_mistyped_field() {
        let cases = [
            (
                r#"{"parts":[{"functionCall":{"name":"a"}},{"functionCall":{"args":{}}}]}"#,
                "gemini: parts[1] (functionCall) has no name",
            ),
            (
                r#"{"parts":[{"functionCall":{"name":7}}]}"#,
                "gemini: parts[0] (functionCall) name must be a string, got a number",
            ),
            (
                r#"{"parts":[{"functionCall":{"name":"a","id":""}}]}"#,
                "gemini: parts[0] (functionCall) has an empty id: the result could not refer to the call; omit it or send a real one",
            ),
            (
                r#"{"parts":[{"functionCall":{"name":"a","id":5}}]}"#,
                "gemini: parts[0] (functionCall) id must be a string, got a number",
            ),
            (
                r#"{"parts":[{"functionCall":"a"}]}"#,
                "gemini: parts[0] (functionCall) must be an object, got a string",
            ),
            (
                r#"{"parts":["hello"]}"#,
                "gemini: parts[0] must be an object, got a string",
            ),
            (
                r#"{"parts":{}}"#,
                "gemini: parts must be an array, got an object",
            ),
            (
                r#"{"candidates":[{"content":{"parts":"x"}}]}"#,
                "gemini: candidates[0].content.parts must be an array, got a string",
            ),
            (
                r#"{"candidates":[{"content":[]}]}"#,
                "gemini: candidates[0].content must be an object, got an array",
            ),
            (
                r#"{"candidates":[{"finishReason":"SAFETY","index":0}]}"#,
                r#"gemini: candidates[0] has no content (finishReason "SAFETY"): the response carries no calls"#,
            ),
            (
                r#"{"candidates":[],"promptFeedback":{"blockReason":"SAFETY"}}"#,
                r#"gemini: candidates is empty (promptFeedback.blockReason "SAFETY"): the response carries no content"#,
            ),
            (
                r#"{"candidates":[1]}"#,
                "gemini: candidates[0] must be an object, got a number",
            ),
            (
                r#"{"candidates":{}}"#,
                "gemini: candidates must be an array, got an object",
            ),
            (
                r#"{"role":"model"}"#,
                "gemini: parts is missing; expected a generateContent response or a Content",
            ),
            (
                "42",
                "gemini: the reply must be an object (a generateContent response or a Content), got a number",
            ),
            (
                r#"{"parts":[{"functionCall":{"name":"a","id":"c"}},{"functionCall":{"name":"b","id":"c"}}]}"#,
                r#"gemini: parts[1] (functionCall) has id "c", already used by parts[0] (functionCall); every call needs its own id"#,
            ),
            (
                "{\"parts\":[",
                "the reply is not valid JSON: EOF while parsing a list at line 1 column 10",
            ),
        ];
        for (input, message) in cases {
            assert_eq!(parse(input), error(message), "{input}");
        }
    }

    #[test]
    fn a_sent_id_keeps_its_text_when_it_equals_a_made_up_name() {
        // The made-up name moves aside; the id Gemini sent is answered as sent.
        let input = r#"{"parts":[{"functionCall":{"name":"a"}},{"functionCall":{"name":"b","id":"call_1"}}]}"#;
        let calls = parse(input);
        assert_eq!(
            calls,
            Ok(vec![
                unsent("call_1_2", "a", "{}"),
                call("call_1", "b", "{}")
            ])
        );
        let calls = calls.unwrap_or_default();
        assert_eq!(
            Value::Array(
                GenerateContent.render_results(&[answer(&calls[0], "A"), answer(&calls[1], "B"),])
            ),
            json!([{"role": "user", "parts": [
                {"functionResponse": {"name": "a", "response": {"output": "A"}}},
                {"functionResponse": {"name": "b", "id": "call_1", "response": {"output": "B"}}},
            ]}])
        );
    }

    #[test]
    fn ids_and_names_are_answered_byte_for_byte() {
        let input = r#"{"parts":[{"functionCall":{"name":" find_tools ","id":" a "}}]}"#;
        let calls = parse(input).unwrap_or_default();
        assert_eq!(calls, vec![call(" a ", " find_tools ", "{}")]);
        assert_eq!(
            Value::Array(GenerateContent.render_results(&[answer(&calls[0], "ok")])),
            json!([{"role": "user", "parts": [
                {"functionResponse": {"name": " find_tools ", "id": " a ", "response": {"output": "ok"}}},
            ]}])
        );
    }

    #[test]
    fn points_other_providers_replies_to_their_provider() {
        let cases = [
            (
                r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"x","arguments":"{}"}}]}"#,
                "gemini: this is an OpenAI Chat Completions reply (tool_calls, function_call or choices); send it with provider openai",
            ),
            (
                r#"{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"x","input":{}}]}"#,
                "gemini: this is an Anthropic Messages reply (tool_use blocks); send it with provider anthropic",
            ),
            (
                r#"{"object":"response","output":[{"type":"function_call","call_id":"c","name":"x","arguments":"{}"}]}"#,
                "gemini: this is an OpenAI Responses reply (function_call items in output); send it with provider openai-responses",
            ),
            (
                r#"[{"type":"function_call","call_id":"c","name":"x","arguments":"{}"}]"#,
                "gemini: this is an OpenAI Responses reply (function_call items in output); send it with provider openai-responses",
            ),
        ];
        for (input, message) in cases {
            assert_eq!(parse(input), error(message), "{input}");
        }
    }

    #[test]
    fn hostile_inputs_are_errors_never_panics() {
        let deep_args = format!(
            r#"{{"parts":[{{"functionCall":{{"name":"x","args":{}}}}}]}}"#,
            "{\"a\":".repeat(50_000)
        );
        for input in [
            "[".repeat(100_000),
            "{\"candidates\":[".repeat(100_000),
            deep_args,
            "null".to_owned(),
            "{\"parts\":[[],{},1]}".to_owned(),
            "{\"parts\":[{\"functionCall\":{\"name\":{},\"id\":[]}}]}".to_owned(),
            "\u{feff}".to_owned(),
        ] {
            assert!(parse(&input).is_err(), "{}", &input[..input.len().min(80)]);
        }
        let huge = "é".repeat(4 << 20);
        let input =
            format!(r#"{{"parts":[{{"functionCall":{{"name":"x","args":{{"s":"{huge}"}}}}}}]}}"#);
        let lengths = parse(&input).map(|calls| calls.iter().map(|c| c.arguments.len()).collect());
        assert_eq!(lengths, Ok(vec![huge.len() + 8]));
    }

    #[test]
    fn renders_one_user_content_of_function_responses_then_every_image() {
        let chart = ["data:image/png;base64,iVBORw0KGgo=".to_owned()];
        let photos = [
            "data:image/jpeg;base64,/9j/4AAQ".to_owned(),
            "https://example.com/chart.gif".to_owned(),
        ];
        let results = [
            unsent_result("power_disco_ball", "[power_disco_ball] on", false, &[]),
            result(
                "fc-8a1b",
                "get_weather",
                "tool=get_weather failed: city not found\nnext: check the spelling",
                true,
                &[],
            ),
            unsent_result(
                "screenshot",
                "[screenshot] 1 image(s) loaded",
                false,
                &chart,
            ),
            result(
                "fc-9",
                "read_files",
                "[read_files] 2 image(s) loaded",
                false,
                &photos,
            ),
        ];
        assert_eq!(
            Value::Array(GenerateContent.render_results(&results)),
            json!([{"role": "user", "parts": [
                {"functionResponse": {"name": "power_disco_ball",
                                      "response": {"output": "[power_disco_ball] on"}}},
                {"functionResponse": {"name": "get_weather", "id": "fc-8a1b",
                                      "response": {"error": "tool=get_weather failed: city not found\nnext: check the spelling"}}},
                {"functionResponse": {"name": "screenshot",
                                      "response": {"output": "[screenshot] 1 image(s) loaded"}}},
                {"functionResponse": {"name": "read_files", "id": "fc-9",
                                      "response": {"output": "[read_files] 2 image(s) loaded"}}},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}},
                {"fileData": {"fileUri": "https://example.com/chart.gif"}},
            ]}])
        );
        assert_eq!(GenerateContent.render_results(&[]), Vec::<Value>::new());
    }

    #[test]
    fn rendered_results_answer_the_parsed_calls_in_order() {
        let calls = parse(PARALLEL).unwrap_or_default();
        let results: Vec<WireResult<'_>> = calls.iter().map(|c| answer(c, "ok")).collect();
        assert_eq!(
            Value::Array(GenerateContent.render_results(&results)),
            json!([{"role": "user", "parts": [
                {"functionResponse": {"name": "power_disco_ball", "response": {"output": "ok"}}},
                {"functionResponse": {"name": "start_music", "response": {"output": "ok"}}},
                {"functionResponse": {"name": "dim_lights", "response": {"output": "ok"}}},
            ]}])
        );
    }

    #[test]
    fn renders_tools_as_one_tool_of_function_declarations_with_the_schema_in_gemini_subset() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                // Property names equal to stripped keywords stay: they are names, not keywords.
                "format": {"type": "string", "description": "markdown or text", "default": "markdown"},
                "default": {"type": "boolean"},
                "limit": {"type": ["integer", "null"], "format": "uint32", "minimum": 1, "default": null},
                "mode": {"type": ["string", "null"], "enum": ["list", "read", null]},
                "when": {"type": "string", "format": "date-time", "examples": ["2026-01-01T00:00:00Z"]},
                "items": {"type": "array", "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"path": {"type": "string", "format": "uri"}},
                    "required": ["path"],
                }},
                "either": {"anyOf": [{"type": "string", "format": "email"}, {"type": "integer", "default": 3}]},
                "extra": {"type": "object", "properties": {}, "additionalProperties": true},
            },
            "required": ["format"],
        });
        let empty = json!({"type": "object", "properties": {}, "additionalProperties": false});
        let tools = [
            ToolDecl {
                name: "fetch",
                description: "Fetch things.",
                parameters: &schema,
            },
            ToolDecl {
                name: "now",
                description: "The time.",
                parameters: &empty,
            },
        ];
        assert_eq!(
            Value::Array(GenerateContent.render_tools(&tools)),
            json!([{"functionDeclarations": [
                {"name": "fetch", "description": "Fetch things.", "parameters": {
                    "type": "object",
                    "properties": {
                        "format": {"type": "string", "description": "markdown or text"},
                        "default": {"type": "boolean"},
                        "limit": {"type": "integer", "nullable": true, "minimum": 1},
                        "mode": {"type": "string", "nullable": true, "enum": ["list", "read"]},
                        "when": {"type": "string", "format": "date-time"},
                        "items": {"type": "array", "items": {
                            "type": "object",
                            "properties": {"path": {"type": "string"}},
                            "required": ["path"],
                        }},
                        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                        "extra": {"type": "object"},
                    },
                    "required": ["format"],
                }},
                {"name": "now", "description": "The time."},
            ]}])
        );
        assert_eq!(GenerateContent.render_tools(&[]), Vec::<Value>::new());
    }
}
