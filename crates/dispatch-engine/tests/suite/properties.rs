//! Property tests: the dedupe key (checklist items 2–3) and pass 1 on arbitrary input
//! (one result per call, in call order, never a panic — DESIGN §6).
// Helpers outside #[test] functions unwrap too: a failure there is a test failure.

use dispatch_engine::canonical::dedupe_key;
use dispatch_engine::{Gate, Provider, RawCall, RoundOutcome, RoundRequest, ToolSpec};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value, json};

use super::support::*;

fn config() -> Config {
    Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Generators

/// Numbers stay where float64 is exact, so "a changed value" is a change under the seed's
/// float64 number rule too.
const SAFE_INT: i64 = 1 << 50;

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-SAFE_INT..SAFE_INT).prop_map(|n| json!(n)),
        (-1.0e6f64..1.0e6).prop_map(|f| json!(f)),
        "[a-zA-Z0-9 <>&\"\\\\é\n\t]{0,12}".prop_map(Value::String),
    ]
}

pub(super) fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

pub(super) fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map("[a-zA-Z_]{1,8}", json_value(), 0..8)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// A small deterministic generator for shuffles and spacing.
pub(super) struct Lcg(pub(super) u64);

impl Lcg {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn space(&mut self) -> &'static str {
        [" ", "", "\n", "\t", "  ", "\r\n  "][self.below(6)]
    }
}

/// JSON text of `v` with object keys shuffled, optional pretty layout and random spacing, and
/// integers sometimes spelled as floats (`3` → `3.0`).
fn render(v: &Value, rng: &mut Lcg, pretty: bool, depth: usize, out: &mut String) {
    let indent = |out: &mut String, depth: usize| {
        if pretty {
            out.push('\n');
            out.push_str(&"  ".repeat(depth));
        }
    };
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            for i in (1..entries.len()).rev() {
                let j = rng.below(i + 1);
                entries.swap(i, j);
            }
            out.push('{');
            for (i, (k, x)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(out, depth + 1);
                out.push_str(rng.space());
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(rng.space());
                out.push(':');
                out.push_str(rng.space());
                render(x, rng, pretty, depth + 1, out);
            }
            indent(out, depth);
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(rng.space());
                render(x, rng, pretty, depth + 1, out);
            }
            out.push_str(rng.space());
            out.push(']');
        }
        Value::Number(n) if n.is_i64() && rng.below(2) == 0 => {
            out.push_str(&format!("{n}.0"));
        }
        other => out.push_str(&serde_json::to_string(other).unwrap()),
    }
}

/// JSON pointers of every leaf (scalars, empty arrays and empty objects).
fn leaves(v: &Value, pointer: String, out: &mut Vec<String>) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, x) in map {
                leaves(x, format!("{pointer}/{k}"), out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, x) in items.iter().enumerate() {
                leaves(x, format!("{pointer}/{i}"), out);
            }
        }
        _ => out.push(pointer),
    }
}

/// A different value for a leaf.
fn changed(v: &Value) -> Value {
    match v {
        Value::Null => json!(false),
        Value::Bool(b) => json!(!b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => json!(i + 1),
            None => json!(n.as_f64().unwrap() + 1.0),
        },
        Value::String(s) => json!(format!("{s}x")),
        Value::Array(_) => json!([null]),
        Value::Object(_) => {
            let mut m = Map::new();
            m.insert("k".into(), Value::Null);
            Value::Object(m)
        }
    }
}

fn key_of(name: &str, text: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    dedupe_key(name, parsed.as_ref(), text).to_hex()
}

// ---------------------------------------------------------------------------------------------
// (a) The dedupe key

proptest! {
    #![proptest_config(config())]

    #[test]
    fn dedupe_key_ignores_key_order_and_whitespace(
        object in json_object(),
        seed in any::<u64>(),
        pretty in any::<bool>(),
    ) {
        let compact = serde_json::to_string(&object).unwrap();
        let mut rng = Lcg(seed);
        let mut text = String::from(rng.space());
        render(&object, &mut rng, pretty, 0, &mut text);
        text.push_str(rng.space());
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(reparsed.as_object().map(Map::len), object.as_object().map(Map::len));
        prop_assert_eq!(key_of("tool", &text), key_of("tool", &compact), "{}", text);
    }

    #[test]
    fn dedupe_key_changes_when_any_value_changes(
        object in json_object(),
        pick in any::<usize>(),
        seed in any::<u64>(),
    ) {
        let mut all = Vec::new();
        leaves(&object, String::new(), &mut all);
        let pointer = &all[pick % all.len()];
        let mut mutated = object.clone();
        let target = mutated.pointer_mut(pointer).unwrap();
        *target = changed(target);
        prop_assert_ne!(&mutated, &object);
        let mut rng = Lcg(seed);
        let mut text = String::new();
        render(&mutated, &mut rng, false, 0, &mut text);
        let original = serde_json::to_string(&object).unwrap();
        prop_assert_ne!(key_of("tool", &text), key_of("tool", &original), "{} at {}", text, pointer);
        // The tool name is part of the key too.
        prop_assert_ne!(key_of("tool", &original), key_of("tool2", &original));
    }
}

// ---------------------------------------------------------------------------------------------
// (b) Pass 1 on arbitrary input

pub(super) const KNOWN: [&str; 7] = [
    "run_tool",
    "find_tools",
    "echo",
    "strict",
    "flaky",
    "guarded",
    "write_todo",
];

pub(super) fn tool_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(KNOWN.to_vec()).prop_map(str::to_string),
        prop::sample::select(KNOWN.to_vec()).prop_map(|n| format!(" {n}<|channel|>commentary")),
        "[a-z_]{0,12}",
        ".{0,16}",
        ".{0,6}<\\|.{0,6}",
    ]
}

pub(super) fn arguments() -> impl Strategy<Value = String> {
    prop_oneof![
        json_value().prop_map(|v| v.to_string()),
        json_object().prop_map(|v| v.to_string()),
        ".{0,40}",
        (tool_name(), json_value())
            .prop_map(|(name, args)| json!({"name": name, "args": args}).to_string()),
        (tool_name(), ".{0,20}")
            .prop_map(|(name, args)| json!({"name": name, "args": args}).to_string()),
        (0usize..20_000).prop_map(|n| json!({"x": "a".repeat(n)}).to_string()),
        (0usize..5_000).prop_map(|n| "[".repeat(n)),
        Just(String::new()),
        Just("null".to_string()),
    ]
}

fn raw_call() -> impl Strategy<Value = RawCall> {
    ("[ a-z0-9]{0,6}", tool_name(), arguments())
        .prop_map(|(id, name, arguments)| RawCall::new(id, name, arguments))
}

pub(super) fn pass_one_fixture() -> Fixture {
    pass_one_tools().build()
}

/// The tools of [`pass_one_fixture`], for a target that adds its own.
pub(super) fn pass_one_tools() -> FixtureBuilder {
    let strict = ToolSpec::new(
        "strict",
        "strict tool",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
    )
    .read_only();
    fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .tool(TestTool::new(strict, Behaviour::Echo))
        .tool(TestTool::new(spec("flaky"), Behaviour::Fail("boom".into())))
        .tool(TestTool::new(
            spec("guarded").gate(Gate::Ask),
            Behaviour::Echo,
        ))
        .tool(TestTool::new(
            spec("write_todo"),
            Behaviour::Text("saved".into()),
        ))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_input_yields_one_result_per_call_in_call_order(
        calls in prop::collection::vec(raw_call(), 0..8),
        provider in prop::sample::select(Provider::ALL.to_vec()),
        mark in any::<bool>(),
        exclude in any::<bool>(),
        repeat in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcomes: Vec<RoundOutcome> = rt.block_on(async {
            let fx = pass_one_fixture();
            if mark {
                fx.mark_all("s").await;
            }
            let rounds = if repeat { 2 } else { 1 };
            let mut outcomes = Vec::new();
            for _ in 0..rounds {
                let mut req = RoundRequest::new("s", "r", provider, calls.clone());
                if exclude {
                    req.exclude = vec!["ec*".into(), "flaky".into()];
                }
                outcomes.push(fx.engine.round(req).await.expect("a round never errors"));
            }
            outcomes
        });
        // Answered byte for byte: an id is never trimmed.
        let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        for out in &outcomes {
            let answered: Vec<&str> = out.results.iter().map(|r| r.tool_call_id.as_str()).collect();
            prop_assert_eq!(&answered, &ids);
            let tool_results = event_types(&out.events, None)
                .iter()
                .filter(|t| *t == "ToolResult")
                .count();
            prop_assert_eq!(tool_results, calls.len());
        }
    }
}

#[test]
fn dedupe_key_ignores_key_order_for_integers_beyond_float_precision() {
    for n in [
        "9007199254740993",
        "18446744073709551615",
        "-9223372036854775808",
    ] {
        let a = format!(r#"{{"a": {n}, "b": 1}}"#);
        let b = format!(r#"{{"b":1,"a":{n}}}"#);
        assert_eq!(key_of("tool", &a), key_of("tool", &b), "{n}");
    }
}
