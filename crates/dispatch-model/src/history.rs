//! Growing a provider-native history by one round.

use serde_json::Value;

use crate::ProviderKind;

/// Appends a turn's `message` and the results the engine rendered for its calls: Responses
/// output items join the input list one by one, every other provider's message is one entry.
/// An empty message (no content at all) is left out: every provider refuses one in a request.
pub fn append_round(
    provider: ProviderKind,
    history: &mut Vec<Value>,
    message: &Value,
    results: Vec<Value>,
) {
    match (provider, message) {
        (ProviderKind::OpenAiResponses, Value::Array(items)) => {
            history.extend(items.iter().cloned());
        }
        _ if is_empty(provider, message) => {}
        _ => history.push(message.clone()),
    }
    history.extend(results);
}

/// Results of one model reply that were stored in two parts (the calls that ran when the
/// round parked on the user, then the answer) made one message again where the provider
/// wants all of a reply's results in the message after it (Anthropic, Gemini).
pub fn coalesce(provider: ProviderKind, history: Vec<Value>) -> Vec<Value> {
    let (list, kind) = match provider {
        ProviderKind::Anthropic => ("content", "tool_result"),
        ProviderKind::Gemini => ("parts", "functionResponse"),
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => return history,
    };
    let only_results = |message: &Value| {
        message.get("role").and_then(Value::as_str) == Some("user")
            && message
                .get(list)
                .and_then(Value::as_array)
                .is_some_and(|items| {
                    !items.is_empty()
                        && items.iter().all(|item| {
                            item.get("type").and_then(Value::as_str) == Some(kind)
                                || item.get(kind).is_some()
                        })
                })
    };
    let mut out: Vec<Value> = Vec::with_capacity(history.len());
    for message in history {
        if only_results(&message)
            && let Some(last) = out.last_mut().filter(|last| only_results(last))
            && let (Some(into), Some(Value::Array(more))) = (
                last.get_mut(list).and_then(Value::as_array_mut),
                message.get(list).cloned(),
            )
        {
            into.extend(more);
            continue;
        }
        out.push(message);
    }
    out
}

fn is_empty(provider: ProviderKind, message: &Value) -> bool {
    let empty_array = |v: Option<&Value>| v.and_then(Value::as_array).is_some_and(Vec::is_empty);
    match provider {
        ProviderKind::Anthropic => empty_array(message.get("content")),
        ProviderKind::Gemini => empty_array(message.get("parts")),
        ProviderKind::OpenAi => {
            message.get("content").is_none_or(Value::is_null) && message.get("tool_calls").is_none()
        }
        ProviderKind::OpenAiResponses => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn responses_items_are_spread_and_other_messages_pushed_whole() {
        let results =
            vec![json!({"type": "function_call_output", "call_id": "c1", "output": "ok"})];
        let mut history = vec![json!({"role": "user", "content": "hi"})];
        let items =
            json!([{"type": "reasoning", "id": "rs1"}, {"type": "function_call", "call_id": "c1"}]);
        append_round(
            ProviderKind::OpenAiResponses,
            &mut history,
            &items,
            results.clone(),
        );
        assert_eq!(
            history,
            vec![
                json!({"role": "user", "content": "hi"}),
                json!({"type": "reasoning", "id": "rs1"}),
                json!({"type": "function_call", "call_id": "c1"}),
                results[0].clone(),
            ]
        );

        let mut history = Vec::new();
        let message = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]});
        let result =
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]});
        append_round(
            ProviderKind::Anthropic,
            &mut history,
            &message,
            vec![result.clone()],
        );
        assert_eq!(history, vec![message, result]);
    }

    #[test]
    fn results_stored_in_two_parts_go_back_as_one_message() {
        let anthropic = vec![
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "a"}, {"type": "tool_use", "id": "b"}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b"}]}),
            json!({"role": "user", "content": "next task"}),
        ];
        assert_eq!(
            coalesce(ProviderKind::Anthropic, anthropic.clone()),
            vec![
                anthropic[0].clone(),
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a"},
                    {"type": "tool_result", "tool_use_id": "b"}]}),
                anthropic[3].clone(),
            ]
        );
        let gemini = vec![
            json!({"role": "user", "parts": [{"functionResponse": {"name": "x"}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"name": "ask_user"}}]}),
        ];
        assert_eq!(
            coalesce(ProviderKind::Gemini, gemini),
            vec![json!({"role": "user", "parts": [
                {"functionResponse": {"name": "x"}},
                {"functionResponse": {"name": "ask_user"}}]})]
        );
        // Two user tasks are never merged, nor are OpenAI's separate tool messages.
        let tasks = vec![
            json!({"role": "user", "content": "one"}),
            json!({"role": "user", "content": "two"}),
        ];
        assert_eq!(coalesce(ProviderKind::Anthropic, tasks.clone()), tasks);
        let openai = vec![
            json!({"role": "tool", "tool_call_id": "a", "content": "1"}),
            json!({"role": "tool", "tool_call_id": "b", "content": "2"}),
        ];
        assert_eq!(coalesce(ProviderKind::OpenAi, openai.clone()), openai);
    }

    #[test]
    fn an_empty_message_is_left_out() {
        let mut history = Vec::new();
        append_round(
            ProviderKind::Gemini,
            &mut history,
            &json!({"role": "model", "parts": []}),
            vec![],
        );
        append_round(
            ProviderKind::Anthropic,
            &mut history,
            &json!({"role": "assistant", "content": []}),
            vec![],
        );
        append_round(
            ProviderKind::OpenAi,
            &mut history,
            &json!({"role": "assistant", "content": null}),
            vec![],
        );
        assert_eq!(history, Vec::<Value>::new());
    }
}
