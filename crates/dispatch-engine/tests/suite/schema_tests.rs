//! Declared schemas with their dialect's full semantics (issue 16, part 5): the one compile
//! path every tool goes through (`CompiledSchema::compile`, used by `Registry::register` and
//! by client tools) picks the dialect from `$schema`, resolves `$ref` only inside the
//! document, asserts known formats and reads Unicode regexes.

use std::sync::Arc;

use dispatch_engine::{CompiledSchema, Registry, RegistryError, Status, ToolSpec};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

const DRAFT7: &str = "http://json-schema.org/draft-07/schema#";
const DRAFT2019: &str = "https://json-schema.org/draft/2019-09/schema";
const DRAFT2020: &str = "https://json-schema.org/draft/2020-12/schema";

/// `schema` under `dialect` (`None`: no `$schema`).
fn in_dialect(dialect: Option<&str>, mut schema: Value) -> Value {
    if let Some(uri) = dialect {
        schema["$schema"] = json!(uri);
    }
    schema
}

/// The verdict pass 1 gives `args`: `None` when valid, else the message after `tool=t failed: `.
fn verdict(schema: &CompiledSchema, args: &Value) -> Option<String> {
    schema
        .check_args("t", Some(args.clone()), &args.to_string())
        .err()
}

/// Rows of (arguments, expected verdict) against one schema in one dialect.
fn check_rows(dialect: Option<&str>, schema: Value, rows: &[(Value, Option<&str>)]) {
    let schema = in_dialect(dialect, schema);
    let compiled = CompiledSchema::compile(&schema)
        .unwrap_or_else(|p| panic!("{schema} did not compile: {p}"));
    for (args, expected) in rows {
        assert_eq!(
            verdict(&compiled, args).as_deref(),
            *expected,
            "{dialect:?}: {args} against {schema}"
        );
    }
}

fn invalid(pointer_and_reason: &str) -> Option<String> {
    Some(format!("invalid arguments: {pointer_and_reason}"))
}

// ---- 2020-12 (also the dialect of a schema without $schema) -------------------------------

#[test]
fn draft_2020_12_semantics_are_applied() {
    for dialect in [Some(DRAFT2020), None] {
        // unevaluatedProperties sees what allOf evaluated.
        check_rows(
            dialect,
            json!({"type": "object",
                   "allOf": [{"properties": {"a": {"type": "string"}}}],
                   "unevaluatedProperties": false}),
            &[
                (json!({"a": "x"}), None),
                (
                    json!({"a": "x", "b": 1}),
                    invalid("/: Unevaluated properties are not allowed ('b' was unexpected)")
                        .as_deref(),
                ),
            ],
        );
        // dependentRequired and dependentSchemas.
        check_rows(
            dialect,
            json!({"type": "object",
                   "dependentRequired": {"card": ["billing"]},
                   "dependentSchemas": {"card": {"properties": {"cvc": {"type": "integer"}}}}}),
            &[
                (json!({}), None),
                (json!({"card": 1, "billing": 2}), None),
                (
                    json!({"card": 1}),
                    invalid("/: \"billing\" is a required property").as_deref(),
                ),
                (
                    json!({"card": 1, "billing": 2, "cvc": "12"}),
                    invalid("/cvc: \"12\" is not of type \"integer\"").as_deref(),
                ),
            ],
        );
        // $defs + $ref, with a sibling keyword that applies beside $ref, and $anchor.
        check_rows(
            dialect,
            json!({"type": "object",
                   "$defs": {"pos": {"type": "integer", "minimum": 1},
                             "word": {"$anchor": "word", "type": "string"}},
                   "properties": {"p": {"$ref": "#/$defs/pos", "maximum": 5},
                                  "w": {"$ref": "#word"}}}),
            &[
                (json!({"p": 3, "w": "ok"}), None),
                (
                    json!({"p": 0}),
                    invalid("/p: 0 is less than the minimum of 1").as_deref(),
                ),
                (
                    json!({"p": 9}),
                    invalid("/p: 9 is greater than the maximum of 5").as_deref(),
                ),
                (
                    json!({"w": 1}),
                    invalid("/w: 1 is not of type \"string\"").as_deref(),
                ),
            ],
        );
        // prefixItems with items: false.
        check_rows(
            dialect,
            json!({"type": "object", "properties": {"t": {
                "type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "items": false}}}),
            &[
                (json!({"t": ["a", 1]}), None),
                (
                    json!({"t": ["a", 1, 2]}),
                    invalid("/t/2: False schema does not allow 2").as_deref(),
                ),
            ],
        );
    }
}

// ---- 2019-09 ------------------------------------------------------------------------------

#[test]
fn draft_2019_09_semantics_are_applied() {
    let dialect = Some(DRAFT2019);
    check_rows(
        dialect,
        json!({"type": "object",
               "allOf": [{"properties": {"a": {"type": "string"}}}],
               "unevaluatedProperties": false}),
        &[
            (json!({"a": "x"}), None),
            (
                json!({"a": "x", "b": 1}),
                invalid("/: Unevaluated properties are not allowed ('b' was unexpected)")
                    .as_deref(),
            ),
        ],
    );
    check_rows(
        dialect,
        json!({"type": "object", "dependentRequired": {"card": ["billing"]}}),
        &[
            (json!({"card": 1, "billing": 2}), None),
            (
                json!({"card": 1}),
                invalid("/: \"billing\" is a required property").as_deref(),
            ),
        ],
    );
    // Tuples are `items: [...]` with additionalItems in 2019-09.
    check_rows(
        dialect,
        json!({"type": "object",
               "$defs": {"s": {"type": "string"}},
               "properties": {"t": {"type": "array",
                                    "items": [{"$ref": "#/$defs/s"}, {"type": "integer"}],
                                    "additionalItems": false}}}),
        &[
            (json!({"t": ["a", 1]}), None),
            (
                json!({"t": [1, 1]}),
                invalid("/t/0: 1 is not of type \"string\"").as_deref(),
            ),
            (
                json!({"t": ["a", 1, 2]}),
                invalid("/t: Additional items are not allowed (2 was unexpected)").as_deref(),
            ),
        ],
    );
}

// ---- draft-07 -----------------------------------------------------------------------------

#[test]
fn draft_07_semantics_are_applied() {
    let dialect = Some(DRAFT7);
    // definitions + $ref; keywords beside $ref are ignored in draft-07.
    check_rows(
        dialect,
        json!({"type": "object",
               "definitions": {"pos": {"type": "integer", "minimum": 1}},
               "properties": {"p": {"$ref": "#/definitions/pos", "maximum": 5}}}),
        &[
            (json!({"p": 9}), None),
            (
                json!({"p": 0}),
                invalid("/p: 0 is less than the minimum of 1").as_deref(),
            ),
        ],
    );
    // `dependencies` is draft-07's; the 2019-09 keywords mean nothing here.
    check_rows(
        dialect,
        json!({"type": "object",
               "dependencies": {"card": ["billing"]},
               "dependentRequired": {"cvc": ["card"]},
               "allOf": [{"properties": {"a": {"type": "string"}}}],
               "unevaluatedProperties": false}),
        &[
            (json!({"cvc": 1, "b": 1}), None),
            (
                json!({"card": 1}),
                invalid("/: \"billing\" is a required property").as_deref(),
            ),
        ],
    );
    check_rows(
        dialect,
        json!({"type": "object", "properties": {"t": {
            "type": "array", "items": [{"type": "string"}], "additionalItems": false}}}),
        &[
            (json!({"t": ["a"]}), None),
            (
                json!({"t": ["a", "b"]}),
                invalid("/t: Additional items are not allowed (\"b\" was unexpected)").as_deref(),
            ),
        ],
    );
    // A draft-07 schema is checked against draft-07's meta-schema.
    let bad = json!({"$schema": DRAFT7, "type": "object",
                     "properties": {"a": {"type": "objekt"}}});
    assert_eq!(
        CompiledSchema::compile(&bad).unwrap_err().pointer,
        "/properties/a/type"
    );
}

// ---- Every dialect ------------------------------------------------------------------------

#[test]
fn unicode_pattern_properties_and_patterns_work_in_every_dialect() {
    for dialect in [Some(DRAFT7), Some(DRAFT2019), Some(DRAFT2020), None] {
        check_rows(
            dialect,
            json!({"type": "object",
                   "patternProperties": {"^\\p{L}+$": {"type": "string", "pattern": "^\\p{Lu}\\p{Ll}*$"}},
                   "additionalProperties": false}),
            &[
                (json!({"größe": "Ärger", "имя": "Борис"}), None),
                (
                    json!({"größe": "ärger"}),
                    invalid("/größe: \"ärger\" does not match \"^\\p{Lu}\\p{Ll}*$\"").as_deref(),
                ),
                (
                    json!({"size1": "Big"}),
                    invalid("/: Additional properties are not allowed ('size1' was unexpected)")
                        .as_deref(),
                ),
            ],
        );
    }
}

/// README, "Client tools" / "Schemas": a known `format` is asserted in every dialect; an
/// unknown one is an annotation.
#[test]
fn known_formats_are_asserted_and_unknown_ones_ignored_in_every_dialect() {
    for dialect in [Some(DRAFT7), Some(DRAFT2019), Some(DRAFT2020), None] {
        check_rows(
            dialect,
            json!({"type": "object", "properties": {
                "email": {"type": "string", "format": "email"},
                "when": {"type": "string", "format": "date-time"},
                "ip": {"type": "string", "format": "ipv4"},
                "n": {"type": "integer", "format": "uint64"}}}),
            &[
                (
                    json!({"email": "a@example.org", "when": "2026-12-02T13:00:00Z",
                           "ip": "192.0.2.1", "n": 3}),
                    None,
                ),
                (
                    json!({"email": "not an email"}),
                    invalid("/email: \"not an email\" is not a \"email\"").as_deref(),
                ),
                (
                    json!({"when": "yesterday"}),
                    invalid("/when: \"yesterday\" is not a \"date-time\"").as_deref(),
                ),
                (
                    json!({"ip": "300.1.1.1"}),
                    invalid("/ip: \"300.1.1.1\" is not a \"ipv4\"").as_deref(),
                ),
            ],
        );
    }
}

#[test]
fn remote_references_are_refused_in_every_dialect_and_never_fetched() {
    for (dialect, keyword_home) in [
        (Some(DRAFT7), "definitions"),
        (Some(DRAFT2019), "$defs"),
        (Some(DRAFT2020), "$defs"),
        (None, "$defs"),
    ] {
        for target in [
            "https://example.com/schemas/a.json",
            "http://127.0.0.1:9/a.json#/definitions/x",
            "file:///etc/passwd",
        ] {
            let schema = in_dialect(
                dialect,
                json!({"type": "object", "properties": {"a": {"$ref": target}}}),
            );
            let problem = CompiledSchema::compile(&schema).unwrap_err();
            assert_eq!(
                problem.pointer, "/properties/a/$ref",
                "{dialect:?} {target}"
            );
            assert_eq!(
                problem.reason,
                format!(
                    "$ref {target:?} points outside the schema; remote references are never fetched, so copy what it names under \"$defs\" (draft-07: \"definitions\") and refer to it as \"#/$defs/NAME\""
                )
            );
        }
        // An `$id` inside the document is not remote: its `$ref` resolves without a fetch.
        let embedded = in_dialect(
            dialect,
            json!({"type": "object",
                   keyword_home: {"a": {"$id": "https://example.com/a", "type": "string"}},
                   "properties": {"x": {"$ref": "https://example.com/a"}}}),
        );
        let compiled =
            CompiledSchema::compile(&embedded).unwrap_or_else(|p| panic!("{dialect:?}: {p}"));
        assert_eq!(
            verdict(&compiled, &json!({"x": 1})),
            invalid("/x: 1 is not of type \"string\"")
        );
    }
}

#[test]
fn a_schema_naming_an_unknown_dialect_or_a_dangling_ref_is_refused() {
    let unknown = CompiledSchema::compile(
        &json!({"$schema": "https://json-schema.org/draft/2030-01/schema", "type": "object"}),
    )
    .unwrap_err();
    assert_eq!(unknown.pointer, "/$schema");
    assert!(
        unknown.reason.starts_with(
            "unknown dialect \"https://json-schema.org/draft/2030-01/schema\"; name draft-07"
        ),
        "{}",
        unknown.reason
    );
    let not_text = CompiledSchema::compile(&json!({"$schema": 7, "type": "object"})).unwrap_err();
    assert_eq!(not_text.pointer, "/$schema");
    // An embedded resource's dialect is checked too; a `const` holding "$schema" is data.
    let embedded = CompiledSchema::compile(&json!({"type": "object", "properties": {
        "a": {"$id": "https://example.com/a", "$schema": "https://example.com/dialect"},
        "b": {"const": {"$schema": "anything"}}}}))
    .unwrap_err();
    assert_eq!(embedded.pointer, "/properties/a/$schema");
    assert!(
        embedded
            .reason
            .starts_with("unknown dialect \"https://example.com/dialect\"; name draft-07"),
        "{embedded:?}"
    );
    let data = json!({"type": "object", "properties": {"b": {"const": {"$schema": "anything"}}}});
    assert!(CompiledSchema::compile(&data).is_ok());
    for (dialect, home) in [(Some(DRAFT7), "definitions"), (Some(DRAFT2020), "$defs")] {
        let schema = in_dialect(
            dialect,
            json!({"type": "object", "properties": {"list": {"type": "array",
                   "items": {"$ref": format!("#/{home}/missing")}}}}),
        );
        let problem = CompiledSchema::compile(&schema).unwrap_err();
        assert_eq!(
            (problem.pointer.as_str(), problem.reason),
            (
                "/properties/list/items/$ref",
                format!("$ref \"#/{home}/missing\" points at nothing in this schema")
            )
        );
    }
}

/// Every tool origin compiles through `Registry::register` (MCP tools today): a registered
/// draft-07 tool gets draft-07 semantics in a round, and a remote `$ref` is refused there.
#[tokio::test]
async fn a_registered_tool_gets_its_dialect_in_a_round_and_a_remote_ref_is_refused() {
    let schema = json!({"$schema": DRAFT7, "type": "object",
                        "dependencies": {"card": ["billing"]},
                        "properties": {"card": {"type": "string"}, "billing": {"type": "string"}}});
    let tool = TestTool::new(
        ToolSpec::new("pay", "d", schema).read_only(),
        Behaviour::Echo,
    );
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "pay", json!({"card": "4111"})),
                wrapped("b", "pay", json!({"card": "4111", "billing": "home"})),
            ],
        )
        .await;
    assert_eq!(
        results(&out),
        vec![
            (
                Status::Invalid,
                "tool=pay failed: invalid arguments: /: \"billing\" is a required property"
                    .to_string()
            ),
            (
                Status::Ok,
                r#"[pay] echo:{"billing":"home","card":"4111"}"#.to_string()
            ),
        ]
    );

    let mut registry = Registry::empty();
    let remote = TestTool::new(
        ToolSpec::new(
            "mcp__srv__fetchy",
            "d",
            json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}),
        ),
        Behaviour::Echo,
    );
    assert_eq!(
        registry.register(Arc::new(remote)),
        Err(RegistryError::BadSchema {
            name: "mcp__srv__fetchy".into(),
            reason: "at /properties/a/$ref: $ref \"https://example.com/a.json\" points outside the schema; remote references are never fetched, so copy what it names under \"$defs\" (draft-07: \"definitions\") and refer to it as \"#/$defs/NAME\"".into(),
        })
    );
}

/// DESIGN §6: size limits on declarations hold for every registered tool, not only client
/// tools.
#[test]
fn an_oversized_declaration_is_refused_at_registration() {
    let mut registry = Registry::empty();
    let wordy = TestTool::new(
        ToolSpec::new(
            "wordy",
            "w".repeat(16 * 1024 + 1),
            json!({"type": "object"}),
        ),
        Behaviour::Echo,
    );
    let refused = registry.register(Arc::new(wordy)).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "tool \"wordy\" has a description of 16385 bytes; the limit is 16384 bytes"
    );
    let huge = TestTool::new(
        ToolSpec::new(
            "huge",
            "d",
            json!({"type": "object", "description": "h".repeat(64 * 1024)}),
        ),
        Behaviour::Echo,
    );
    assert_eq!(
        registry.register(Arc::new(huge)),
        Err(RegistryError::TooLarge {
            name: "huge".into(),
            field: "parameters",
            size: 65570,
            limit: 65536
        })
    );
    assert!(registry.is_empty());
}
