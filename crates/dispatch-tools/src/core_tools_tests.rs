//! What models read most: the core tools' descriptions and schemas as each provider receives
//! them (seed §2.1), snapshotted so any change to them is reviewed; and the size of the tools
//! array in real tokens, deferred against sending every full schema.

use std::sync::Arc;

use dispatch_engine::wire::ToolDecl;
use dispatch_engine::{CORE_TOOLS, Headless, Provider};
use serde_json::Value;

use crate::test_support::Harness;

async fn tools_array(h: &Harness, provider: Provider) -> Vec<Value> {
    h.engine
        .tools("fresh-session", provider, &[], &[])
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn core_tools_as_each_provider_receives_them() {
    let h = Harness::with_confirmer(Arc::new(Headless));
    for (provider, name) in [
        (Provider::OpenAi, "openai"),
        (Provider::Anthropic, "anthropic"),
        (Provider::ClaudeCode, "claude_code"),
        (Provider::OpenAiResponses, "openai_responses"),
        (Provider::Gemini, "gemini"),
    ] {
        let tools = tools_array(&h, provider).await;
        insta::assert_json_snapshot!(format!("core_tools_{name}"), tools);
    }
}

/// Every registered tool with its full schema, as a runtime without deferral would send it.
fn every_full_schema(provider: Provider) -> Vec<Value> {
    let registry = crate::builtin_registry().unwrap();
    let decls: Vec<ToolDecl<'_>> = registry
        .iter()
        .filter(|t| t.name() != "run_tool")
        .map(|t| ToolDecl {
            name: &t.spec().name,
            description: &t.spec().description,
            parameters: &t.spec().parameters,
        })
        .collect();
    provider.format().render_tools(&decls)
}

#[tokio::test]
async fn deferral_keeps_the_tools_array_a_fraction_of_every_full_schema() {
    let bpe = tiktoken_rs::o200k_base().unwrap();
    let tokens = |tools: &[Value]| {
        bpe.encode_ordinary(&Value::from(tools.to_vec()).to_string())
            .len()
    };
    let h = Harness::new();
    let mut rows = Vec::new();
    for provider in Provider::ALL {
        let sent = tokens(&tools_array(&h, provider).await);
        let full = tokens(&every_full_schema(provider));
        rows.push(format!(
            "{provider}: {sent} tokens sent, {full} with every full schema ({:.0}%)",
            100.0 * sent as f64 / full as f64
        ));
        // The point of deferral: the array stays well under what every schema would cost.
        assert!(sent * 2 < full, "{provider}: {sent} of {full} tokens");
    }
    println!(
        "tools array, o200k_base tokens ({} core tools):\n{}",
        CORE_TOOLS.len(),
        rows.join("\n")
    );
}

/// A misspelled built-in, called directly or through run_tool, is answered with the built-in
/// it is a typo of, first among the suggestions and written the way the model can call it.
#[tokio::test]
async fn a_misspelled_built_in_suggests_it_on_both_paths() {
    let h = Harness::with_confirmer(Arc::new(Headless));
    // (what the model called, the tool it meant, how a direct call is told to call it)
    let typos = [
        ("calcualte", "calculate", "run_tool(name=calculate)"), // two letters swapped
        ("calculte", "calculate", "run_tool(name=calculate)"),  // a letter missing
        ("calculatte", "calculate", "run_tool(name=calculate)"), // a letter too many
        ("calculote", "calculate", "run_tool(name=calculate)"), // a wrong letter
        ("Read-Files", "read_files", "run_tool(name=read_files)"), // case and separator
        ("fetch_pgae", "fetch_page", "run_tool(name=fetch_page)"), // a swap in a longer name
        ("writetodo", "write_todo", "write_todo"),              // a core tool, called directly
    ];
    for (n, (typo, meant, direct)) in typos.into_iter().enumerate() {
        let out = h
            .round(
                "s",
                &format!("r{n}"),
                vec![
                    crate::test_support::call("a", typo, serde_json::json!({})),
                    crate::test_support::run_tool("b", typo, serde_json::json!({})),
                ],
            )
            .await;
        let firsts: Vec<Option<&str>> = out
            .results
            .iter()
            .map(|r| {
                r.content
                    .split_once("Did you mean: ")
                    .and_then(|(_, list)| list.strip_suffix('?'))
                    .and_then(|list| list.split(", ").next())
            })
            .collect();
        assert_eq!(
            firsts,
            vec![Some(direct), Some(meant)],
            "{typo}: {:?}",
            out.results
        );
    }
}
