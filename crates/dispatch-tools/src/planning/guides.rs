//! The texts behind the `reasoning_guide` tool: short, imperative playbooks the model can
//! pull in when a situation calls for one, instead of carrying them all in the system prompt.

/// Every guide topic with its text, in the order they are listed to the model.
pub const GUIDES: &[(&str, &str)] = &[
    ("tool_error", TOOL_ERROR),
    ("targeted_read", TARGETED_READ),
    ("rag_web", RAG_WEB),
    ("ask_user", ASK_USER),
    ("subagent_dispatch", SUBAGENT_DISPATCH),
    ("write_todo", WRITE_TODO),
    ("html_render", HTML_RENDER),
    ("tool_generate", TOOL_GENERATE),
    ("market_analysis", MARKET_ANALYSIS),
];

/// The guide for a topic, or None.
pub fn guide(topic: &str) -> Option<&'static str> {
    GUIDES
        .iter()
        .find(|(name, _)| *name == topic)
        .map(|(_, text)| *text)
}

/// The topic names, in order.
pub fn topics() -> impl Iterator<Item = &'static str> {
    GUIDES.iter().map(|(name, _)| *name)
}

const TOOL_ERROR: &str = "\
When a result reads `tool=NAME failed: ...`:
1. Read the whole result, not just its first line. It may carry `related_errors:` (past failures of this tool and what fixed them) and ends with a `next:` line. Try a related record's action before inventing your own fix.
2. Never retry with identical arguments: a repeated identical call is not run again, it returns the earlier result. Change the argument, path or approach the error points at.
3. Argument errors name the field: fetch the schema with find_tools(\"select:NAME\") and rebuild the call.
4. Before a second retry, search past errors: error_history(mode=\"search\", keyword=\"<tool name or key words of the message>\").
5. At most 3 attempts at the same goal. Then change approach (another tool, a smaller step) or ask_user, saying what you tried.
6. A `declined` result means the user refused the call. Do not reissue it, with or without changes; continue without it or ask_user to agree on another way.
7. A `timed out` result may carry partial output: use it, then narrow the work (smaller input, fewer files) or move long jobs to background_command.
8. A missing or rejected credential (HTTP 401/403, \"API key\" errors): call store_secret(key=\"NAME\") as the `next:` line says, then retry once.
9. When a different fix worked, record it so the next run starts there: write_error(tool_name, keywords, symptom, cause, action, outcome=\"resolved\"). Record outcome=\"failed\" or \"abandoned\" when you gave up, so nobody repeats the dead end.";

const TARGETED_READ: &str = "\
Read only what you need.
1. Find before you read. find_files(mode=\"search\", queries=[{pattern: \"fn load_config\", file_pattern: \"**/*.rs\"}]) returns matching lines with their line numbers; mode=\"glob\" finds files by name; mode=\"list\" shows a directory.
2. Read around the match, not the whole file: read_files(files=[{path, offset: LINE-20, limit: 60}]). offset is 1-based: a line (a page, slide or row for PDF, PPTX, CSV).
3. Batch: put every file you need into one read_files call instead of one call per file.
4. Don't re-read a file that has not changed; an identical read returns the earlier result anyway. After edit_file, read only the edited region to verify it.
5. For a large file you don't know, read the head (limit 80) to learn its structure, then jump to the part you need.
6. read_files fits each answer to the result budget: a cut-off file ends with the offset to continue from. Other long results are cut with a notice at the top giving the full size and the path of a file holding the whole text: read that file with read_files and offset instead of repeating the call.
7. Stop reading once you can answer, and cite paths with line numbers.";

const RAG_WEB: &str = "\
For questions that need current or outside facts:
1. search_web(query) with specific terms: names, versions, dates. For events use source=\"news\" and a time_range such as \"24h\" or \"7d\".
2. Pick the best 2-4 results, primary sources first (official docs, filings, the project's own site), and fetch_page each. Pass focus/query with what you are looking for so the page comes back trimmed to the relevant part.
3. Cached results say how old they are (\"cached 7 min ago\"). Pass force=true only when freshness matters: prices, scores, breaking news.
4. For structured data prefer an API to scraping: public_api_list to find one, http_request(url) for JSON. download_file is for files (PDF, CSV, archives) you will then read with read_files.
5. Cross-check every number or claim that matters in a second source. If sources disagree, say so and give both.
6. Cite the URL, and the date when known, next to each fact you use.
7. After two differently worded searches with nothing relevant, say what you searched and what is missing; do not fill the gap with a guess.";

const ASK_USER: &str = "\
Ask only when the decision belongs to the user:
- the goal is ambiguous and the readings lead to different work;
- a step is destructive or hard to undo (deleting, overwriting, sending, paying);
- you need a preference or a fact only the user has.
Do not ask for what tools can find. Never ask for a password, token or API key in a question: call store_secret(key=\"NAME\"), which prompts with masked input and keeps the value out of the transcript.
How to ask:
1. Few questions (1-3), each precise and answerable in seconds. Give options when the answer is a choice, multi_select when several may apply, and detail for the context the user needs to decide.
2. Fill state so the run can resume: objective (the goal in one sentence), completed (what is done, with paths and results), next_steps (what you will do, per likely answer).
3. ask_user pauses the run and other calls in the same reply are dropped: call it alone, as the last thing in your reply.
4. When the answer arrives, continue from next_steps and don't ask again what was answered.";

const SUBAGENT_DISPATCH: &str = "\
subagents(task=...) runs a piece of work in its own session and returns its answer.
Dispatch when:
- the work splits into independent parts (compare three vendors, review three modules);
- a part needs a lot of reading whose detail you don't need, only its conclusion;
- an isolated experiment or a second opinion helps.
Don't dispatch trivial work (one search, one read): doing it yourself is faster and cheaper.
Write the task so a stranger could do it:
1. The goal and why, in one or two sentences.
2. Every input: paths, URLs, constraints, definitions. The subagent cannot see your conversation.
3. Scope: what to do and what to leave alone. Subagents cannot edit files or start subagents of their own.
4. What to return, with shape and size: \"a table with columns vendor, price, source URL; at most 200 words\".
Limits: at most 3 legs run in parallel; put independent dispatches in the same reply so they run together. Each leg has a time budget, so split long jobs.
Work you don't need before going on: background_subagents(task=...) starts it and returns an id at once; read it later (mode=read, id=...), stop it when no longer needed (mode=stop). At most 16 run at once per session, apart from the 3 above.
Afterwards: check the claims you will rely on, merge the answers, and don't paste them verbatim.";

const WRITE_TODO: &str = "\
Use write_todo for tasks of 3 or more steps, or when the user hands you a list. Skip it for one- or two-step tasks.
1. Each call replaces the whole list: always send every item with its current status.
2. Status is pending, in_progress or completed. Exactly one item is in_progress while you work; set it before you start the step.
3. Mark an item completed as soon as it is done and checked, in the same reply that starts the next step, not in a batch at the end.
4. Keep items short and verifiable: \"Add --dry-run flag to cli.rs\", \"Run the tests and fix failures\", not \"Improve the code\".
5. content says what to do; active_form says what is happening (\"Adding the --dry-run flag\").
6. Add items as you discover work; drop items that became unnecessary and say why.
7. Never mark failed or partial work completed: keep it in_progress and add an item for the blocker.";

const HTML_RENDER: &str = "\
For HTML deliverables (reports, tables, dashboards) render with html_template rather than writing markup by hand.
1. Choose a built-in template (report, table, card list; find_tools(\"select:html_template\") shows the exact names) or pass your own inline template in minijinja syntax: {{ title }}, {% for row in rows %}...{% endfor %}.
2. Pass the content as JSON in data. Keep data and layout apart: numbers and text go in data, never spliced into the template text.
3. Values are HTML-escaped automatically: don't escape them yourself, and never paste raw web or user content into the template itself.
4. Check the output once: every section present, units and dates formatted, no empty tables, sources linked by URL.
5. Keep the page self-contained: inline CSS, no external scripts.
6. Save it with write_result(content=<html>, format=\"html\", title=...). Don't repeat the HTML in your answer; summarise it in two or three lines.";

const TOOL_GENERATE: &str = "\
When you write a new tool (a script_ or ext_ tool), make it easy to call correctly.
1. One job per tool. Split \"fetch and summarise\" in two if either half is useful alone.
2. Name it verb_object, specific and snake_case: script_convert_csv_to_json, not script_helper.
3. Description: the first sentence says what it does, the second when to use it and when not; mention side effects (writes files, sends messages, costs money).
4. Parameters: a JSON Schema object, with required listing what must be given, enum for fixed choices, exact types (integer vs number), defaults stated in the description. No free-form options blobs.
5. Make it idempotent where possible: the same input twice gives the same result and no duplicate side effects.
6. Errors: one line saying what went wrong and what to do next (\"file not found: data.csv; pass a path relative to the work directory\"). Exit non-zero on failure; never report success on failure.
7. Output: plain text or compact JSON of bounded size; write large output to a file and return its path.
8. Declare concurrent: true only if the tool shares no side effects with other calls (no shared files, no ordering needs); otherwise leave it serial.
9. Try it with test_tool on a normal case, an edge case and a bad input before relying on it.
Format: a folder in the work directory (e.g. drafts/convert_csv_to_json/) holding tool.json ({\"name\" equal to the folder's name, \"description\", \"parameters\", and optionally \"read_only\", \"concurrent\", \"timeout_s\", \"network\", \"command\"}) and script.py, script.sh or an executable run. The program reads its arguments as JSON on stdin, prints its result on stdout and runs in the work directory. Test it with test_tool(path=\"drafts/convert_csv_to_json\", input={...}); then ask the user to install it with `tooldispatch tools install drafts/convert_csv_to_json` (you cannot install tools yourself).";

const MARKET_ANALYSIS: &str = "\
For a market, company or data analysis:
1. Define the question first: which decision it informs, which metrics answer it (market size, growth, share, price, margin), for which region and period.
2. Gather data: search_web for reports and news (a time_range keeps it current), fetch_page for primary sources (filings, official statistics, company pages), http_request for data APIs (public_api_list finds them). Note the source URL and date of every figure.
3. Compute with calculate, never in your head: growth, CAGR as (end/start)^(1/years)-1, shares, averages. Keep units and currencies consistent and state the exchange rates used.
4. Separate facts from estimates: label each figure as reported, derived (give the formula) or estimated (give the assumption).
5. When two sources differ by more than about 10%, show both values; flag data older than the period asked about.
6. Present: the answer in two or three sentences, then a table (metric, value, unit, date, source), then drivers and risks, then what remains uncertain and how it could be settled.
Present forecasts as scenarios with their assumptions, not as facts.";

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::Value;

    /// snake_case words the guides use that name no tool and no argument: a marker results
    /// carry, a search pattern, and in TOOL_GENERATE the naming advice, example names of a
    /// tool the model writes and the fields of its tool.json.
    const NOT_TOOLS: &[&str] = &[
        "related_errors",
        "load_config",
        "snake_case",
        "verb_object",
        "script_helper",
        "script_convert_csv_to_json",
        "convert_csv_to_json",
        "read_only",
        "timeout_s",
    ];

    /// Every word of `text` that looks like a tool: one called (`name(`), or a snake_case word
    /// (`find_files`); with whether it was called.
    fn tool_like_words(text: &str) -> Vec<(&str, bool)> {
        let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find(is_word) {
            let tail = &rest[start..];
            let end = tail.find(|c: char| !is_word(c)).unwrap_or(tail.len());
            let word = &tail[..end];
            let called = tail[end..].starts_with('(');
            let snake = word.contains('_')
                && !word.starts_with('_')
                && !word.ends_with('_')
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if called || snake {
                out.push((word, called));
            }
            rest = &tail[end..];
        }
        out
    }

    #[test]
    fn tool_like_words_are_calls_and_snake_case_words() {
        assert_eq!(
            tool_like_words(
                "Use send_to_chatbot(chat) or subagents(task=x), not Foo_Bar, _x_ or plain words; then list_chatbot."
            ),
            vec![
                ("send_to_chatbot", true),
                ("subagents", true),
                ("list_chatbot", false),
            ]
        );
    }

    /// Every property name and enum value anywhere in `schema`: the words a guide may use
    /// for a tool's arguments.
    fn argument_words(schema: &Value, into: &mut BTreeSet<String>) {
        match schema {
            Value::Object(map) => {
                if let Some(Value::Object(properties)) = map.get("properties") {
                    into.extend(properties.keys().cloned());
                }
                if let Some(Value::Array(values)) = map.get("enum") {
                    into.extend(values.iter().filter_map(Value::as_str).map(str::to_string));
                }
                map.values().for_each(|v| argument_words(v, into));
            }
            Value::Array(items) => items.iter().for_each(|v| argument_words(v, into)),
            _ => {}
        }
    }

    /// A guide that sends the model to a tool the dispatcher does not have costs a failed
    /// call: every tool a guide calls, and every snake_case word that is no argument of a
    /// tool, must be a tool of the full built-in registry.
    #[test]
    fn every_tool_a_guide_names_is_in_the_built_in_registry() {
        let registry = crate::builtin_registry().unwrap();
        let tools: BTreeSet<&str> = registry.iter().map(|t| t.name()).collect();
        let mut arguments = BTreeSet::new();
        for tool in registry.iter() {
            argument_words(&tool.spec().parameters, &mut arguments);
        }
        let mut unknown = Vec::new();
        let mut named = BTreeSet::new();
        for (topic, text) in GUIDES {
            for (word, called) in tool_like_words(text) {
                if tools.contains(word) {
                    named.insert(word);
                    continue;
                }
                let other_word = arguments.contains(word)
                    || topics().any(|t| t == word)
                    || NOT_TOOLS.contains(&word);
                if called || !other_word {
                    unknown.push(format!("{topic}: {word}{}", if called { "(" } else { "" }));
                }
            }
        }
        assert_eq!(unknown, Vec::<String>::new());
        // The check reads what it should: the guides name these tools.
        for tool in [
            "find_files",
            "read_files",
            "search_web",
            "store_secret",
            "subagents",
        ] {
            assert!(named.contains(tool), "{tool} not found in the guides");
        }
    }

    /// The topic enum of the seed's reasoning_guide schema.
    const SEED_TOPICS: [&str; 9] = [
        "tool_generate",
        "tool_error",
        "rag_web",
        "market_analysis",
        "targeted_read",
        "ask_user",
        "subagent_dispatch",
        "write_todo",
        "html_render",
    ];

    #[test]
    fn topic_names_match_the_seed_enum_exactly() {
        let mut ours: Vec<&str> = topics().collect();
        let mut seed = SEED_TOPICS.to_vec();
        ours.sort_unstable();
        seed.sort_unstable();
        assert_eq!(ours, seed);
    }

    #[test]
    fn every_topic_is_listed_once() {
        let names: Vec<&str> = topics().collect();
        for name in &names {
            assert_eq!(names.iter().filter(|n| *n == name).count(), 1, "{name}");
        }
        assert_eq!(names.len(), GUIDES.len());
    }

    #[test]
    fn topics_keep_the_listing_order() {
        assert_eq!(
            topics().collect::<Vec<_>>(),
            vec![
                "tool_error",
                "targeted_read",
                "rag_web",
                "ask_user",
                "subagent_dispatch",
                "write_todo",
                "html_render",
                "tool_generate",
                "market_analysis",
            ]
        );
    }

    #[test]
    fn every_guide_is_non_empty_and_under_2500_chars() {
        for (name, text) in GUIDES {
            let chars = text.chars().count();
            assert!(!text.trim().is_empty(), "{name} is empty");
            assert!(chars < 2500, "{name} has {chars} chars");
        }
    }

    #[test]
    fn guide_returns_the_text_of_a_known_topic() {
        assert_eq!(guide("write_todo"), Some(WRITE_TODO));
        for name in SEED_TOPICS {
            assert!(guide(name).is_some(), "{name}");
        }
    }

    #[test]
    fn guide_of_an_unknown_topic_is_none() {
        assert_eq!(guide("nope"), None);
        assert_eq!(guide(""), None);
        assert_eq!(guide("Tool_Error"), None);
    }

    #[test]
    fn tool_error_guide_names_the_recovery_tools() {
        let text = guide("tool_error").unwrap_or_default();
        for needle in [
            "related_errors:",
            "next:",
            "error_history",
            "store_secret",
            "outcome=\"resolved\"",
            "declined",
            "timed out",
            "3 attempts",
        ] {
            assert!(text.contains(needle), "missing {needle}");
        }
    }
}
