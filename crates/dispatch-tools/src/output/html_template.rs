//! `html_template`: turn data into an HTML page through a template, so the model writes data
//! and a layout rather than hand-escaped markup. Every value is HTML-escaped, undefined
//! variables are errors (a typo shows up instead of an empty cell), and the work a template
//! may do is bounded by minijinja's fuel, so a hostile template stops with a message instead
//! of spinning. The page is returned, not written: saving it is write_result's job (the
//! deliverables directory, no confirmation) or edit_file's (the work directory, confirmed) —
//! a concurrent, never-asking renderer must not write the user's files.

use std::io::{self, Write};

use async_trait::async_trait;
use dispatch_engine::registry::kind_of;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior, Value as JinjaValue};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::BuiltinTool;
use crate::files::write::human_bytes;

/// The largest inline template accepted, in bytes.
pub const TEMPLATE_CAP: usize = 64 * 1024;
/// The largest `data` accepted, as JSON text.
pub const DATA_CAP: usize = 1024 * 1024;
/// The largest page produced.
pub const OUTPUT_CAP: usize = 1024 * 1024;
/// Template steps one render may take (loops, lookups, output): enough for a table of some
/// ten thousand cells, a fraction of a second of work.
pub const FUEL: u64 = 1_000_000;
/// How deep macros, includes and nested blocks may go.
const RECURSION_LIMIT: usize = 64;

const STYLE: &str = include_str!("templates/style.css");
/// The built-in templates: name, what `data` it reads, source.
pub const BUILTINS: [(&str, &str, &str); 3] = [
    (
        "report",
        "title, summary, sections[{heading, body}]",
        include_str!("templates/report.html"),
    ),
    (
        "table",
        "title, columns[], rows[][]",
        include_str!("templates/table.html"),
    ),
    (
        "card_list",
        "title, cards[{title, body, url}]",
        include_str!("templates/card_list.html"),
    ),
];

/// Render HTML.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HtmlTemplateArgs {
    /// A built-in name (report, table, card_list) or the Jinja template text itself (max 64 KiB).
    template: String,
    /// The template's variables as an object (max 1 MiB as JSON).
    #[serde(default)]
    #[schemars(extend("type" = "object"))]
    data: Option<Value>,
}

pub struct HtmlTemplate;

#[async_trait]
impl BuiltinTool for HtmlTemplate {
    const NAME: &'static str = "html_template";
    const DESCRIPTION: &'static str = "Render an HTML page from data and return it. template: a built-in name — report {title, summary, sections:[{heading, body}]}, table {title, columns:[...], rows:[[...]]}, card_list {title, cards:[{title, body, url}]} — or Jinja template text using data's keys as variables. Every value is HTML-escaped; a variable missing from data is an error (guard optional ones with {% if x %}). Limits: template 64 KiB, data 1 MiB, page 1 MiB, bounded loop work. Save the page with write_result(format=\"html\").";
    type Args = HtmlTemplateArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only().concurrent().effect(Effect::Pure)
    }

    async fn run(&self, _cx: ToolContext, args: HtmlTemplateArgs) -> Result<ToolOutput, ToolError> {
        let (name, source) = choose(&args.template)?;
        let data = match args.data {
            None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
            Some(Value::Object(map)) => Value::Object(map),
            Some(other) => {
                return Err(ToolError::failed(format!(
                    "data must be an object whose keys are the template's variables, got {}; wrap it, e.g. {{\"items\": ...}}",
                    kind_of(&other)
                )));
            }
        };
        let data_len = serde_json::to_string(&data).map(|s| s.len()).unwrap_or(0);
        if data_len > DATA_CAP {
            return Err(ToolError::failed(format!(
                "data is {} as JSON, over the {} limit; pass fewer rows or shorter text",
                human_bytes(data_len as u64),
                human_bytes(DATA_CAP as u64)
            )));
        }
        let page = tokio::task::spawn_blocking(move || render(&name, &source, &data))
            .await
            .map_err(|e| ToolError::failed(format!("rendering stopped unexpectedly: {e}")))??;
        Ok(ToolOutput::text(page))
    }
}

/// The template to render: a built-in by name, else the text itself. A short single word that
/// names no built-in is refused (a misspelt name would otherwise render as its own text).
fn choose(template: &str) -> Result<(String, String), ToolError> {
    let trimmed = template.trim();
    if let Some((name, _, source)) = BUILTINS.iter().find(|(n, _, _)| *n == trimmed) {
        return Ok((name.to_string(), source.to_string()));
    }
    if template.len() > TEMPLATE_CAP {
        return Err(ToolError::failed(format!(
            "the template is {}, over the {} limit; use a built-in template or a shorter one",
            human_bytes(template.len() as u64),
            human_bytes(TEMPLATE_CAP as u64)
        )));
    }
    let looks_like_a_name = trimmed.len() <= 40
        && !trimmed.is_empty()
        && trimmed
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if looks_like_a_name {
        let names: Vec<String> = BUILTINS
            .iter()
            .map(|(n, d, _)| format!("{n} ({d})"))
            .collect();
        return Err(ToolError::failed(format!(
            "no built-in template named {trimmed:?}; the built-ins are {}; or pass the template text itself",
            names.join(", ")
        )));
    }
    Ok(("inline".to_string(), template.to_string()))
}

/// Render with escaping on, strict undefined values, the fuel limit and the output cap.
fn render(name: &str, source: &str, data: &Value) -> Result<String, ToolError> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION_LIMIT);
    // A JSON null prints as nothing (an empty cell), not as "none".
    env.set_formatter(|out, state, value| {
        if value.is_none() {
            Ok(())
        } else {
            minijinja::escape_formatter(out, state, value)
        }
    });
    env.add_global("style", JinjaValue::from_safe_string(STYLE.to_string()));
    env.add_test("http_url", |v: JinjaValue| {
        v.as_str().is_some_and(|s| {
            let s = s.trim_start().to_ascii_lowercase();
            s.starts_with("https://") || s.starts_with("http://")
        })
    });
    let template = env
        .template_from_named_str(name, source)
        .map_err(|e| explain(name, &e, false))?;
    let mut out = Capped::default();
    match template.render_captured_to(JinjaValue::from(Serde(data)), &mut out) {
        Ok(_) => {}
        Err(_) if out.over => {
            return Err(ToolError::failed(format!(
                "the page grew over the {} limit; render fewer rows or shorter text",
                human_bytes(OUTPUT_CAP as u64)
            )));
        }
        Err(e) => return Err(explain(name, &e, true)),
    }
    String::from_utf8(out.buf)
        .map_err(|_| ToolError::failed("the template produced text that is not UTF-8"))
}

/// A template error in terms the model can act on.
fn explain(name: &str, e: &minijinja::Error, rendering: bool) -> ToolError {
    let at = match e.line() {
        Some(line) => format!(" at line {line} of the {name} template"),
        None => format!(" in the {name} template"),
    };
    let detail = e.detail().unwrap_or("");
    let message = match e.kind() {
        ErrorKind::OutOfFuel => format!(
            "the template did too much work (over {FUEL} steps){at}: its loops are too large or nested too deeply; simplify it or pass less data"
        ),
        ErrorKind::UndefinedError => format!(
            "the template uses a value that data does not have{at} ({}); add it to data or guard it with {{% if name %}}",
            if detail.is_empty() {
                "undefined value"
            } else {
                detail
            }
        ),
        _ if !rendering => format!(
            "the template does not parse{at}: {}{}; fix its syntax",
            e.kind(),
            if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            }
        ),
        _ => format!(
            "rendering failed{at}: {}{}",
            e.kind(),
            if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            }
        ),
    };
    ToolError::failed(message)
}

/// An output buffer that refuses to grow past [`OUTPUT_CAP`].
#[derive(Default)]
struct Capped {
    buf: Vec<u8>,
    over: bool,
}

impl Write for Capped {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.buf.len() + bytes.len() > OUTPUT_CAP {
            self.over = true;
            return Err(io::Error::other("output limit reached"));
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use dispatch_engine::Status;
    use serde_json::json;

    use super::*;
    use crate::test_support::*;

    const HOSTILE: &str = "<script>alert(1)</script>";
    const ESCAPED: &str = "&lt;script&gt;alert(1)&lt;&#x2f;script&gt;";

    /// A harness whose session s1 has fetched html_template's schema.
    async fn harness() -> Harness {
        let h = Harness::new();
        h.select("s1", "html_template").await;
        h
    }

    /// One call in a run of its own (so no call is answered from an earlier one), its result
    /// without run_tool's `[html_template] ` prefix.
    async fn render(h: &Harness, args: Value) -> (Status, String) {
        static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let run = format!(
            "r{}",
            RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let out = h
            .round("s1", &run, vec![run_tool("c1", "html_template", args)])
            .await;
        let content = &out.results[0].content;
        let content = content.strip_prefix("[html_template] ").unwrap_or(content);
        (out.results[0].status, content.to_string())
    }

    fn assert_escaped(page: &str) {
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains(ESCAPED), "{page}");
    }

    #[tokio::test]
    async fn report_renders_sections_and_escapes_every_value() {
        let h = harness().await;
        let (status, page) = render(
            &h,
            json!({"template": "report", "data": {
                "title": HOSTILE,
                "summary": "Tom & Jerry",
                "sections": [
                    {"heading": "First", "body": HOSTILE},
                    {"heading": "Second \"quoted\"", "body": "line 1\nline 2"},
                    {"body": "no heading"}
                ]
            }}),
        )
        .await;
        assert_eq!(status, Status::Ok, "{page}");
        assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
        assert_escaped(&page);
        assert_eq!(
            page.matches(ESCAPED).count(),
            3,
            "title twice, body once: {page}"
        );
        assert!(
            page.contains("<p class=\"summary\">Tom &amp; Jerry</p>"),
            "{page}"
        );
        assert!(page.contains("<h2>First</h2>"), "{page}");
        assert!(
            page.contains("<h2>Second &quot;quoted&quot;</h2>"),
            "{page}"
        );
        assert!(
            page.contains("<div class=\"body\">no heading</div>"),
            "{page}"
        );
        assert_eq!(page.matches("<section>").count(), 3);
        // The built-in style is ours and not escaped.
        assert!(page.contains("<style>body{font-family"), "{page}");
    }

    #[tokio::test]
    async fn report_needs_no_optional_fields() {
        let h = harness().await;
        let (status, page) = render(&h, json!({"template": "report"})).await;
        assert_eq!(status, Status::Ok, "{page}");
        assert!(page.contains("<h1>Report</h1>"), "{page}");
    }

    #[tokio::test]
    async fn table_renders_columns_and_rows_escaped() {
        let h = harness().await;
        let (status, page) = render(
            &h,
            json!({"template": "table", "data": {
                "title": "Prices",
                "columns": ["item", HOSTILE],
                "rows": [["apple", 1.5], [HOSTILE, 2], [null, true]]
            }}),
        )
        .await;
        assert_eq!(status, Status::Ok, "{page}");
        assert_escaped(&page);
        assert!(page.contains("<th>item</th>"), "{page}");
        assert!(
            page.contains("<tr><td>apple</td><td>1.5</td></tr>"),
            "{page}"
        );
        assert!(page.contains("<tr><td></td><td>True</td></tr>"), "{page}");
        assert_eq!(page.matches("<tr>").count(), 4, "{page}");
    }

    #[tokio::test]
    async fn card_list_links_only_http_urls() {
        let h = harness().await;
        let (status, page) = render(
            &h,
            json!({"template": "card_list", "data": {
                "title": "Links",
                "cards": [
                    {"title": "Good", "body": HOSTILE, "url": "https://example.com/?a=1&b=\"2\""},
                    {"title": "Evil", "url": "javascript:alert(1)"},
                    {"title": "None"}
                ]
            }}),
        )
        .await;
        assert_eq!(status, Status::Ok, "{page}");
        assert_escaped(&page);
        assert!(
            page.contains("<a href=\"https:&#x2f;&#x2f;example.com&#x2f;?a=1&amp;b=&quot;2&quot;\" rel=\"noopener noreferrer\">Good</a>"),
            "{page}"
        );
        assert!(!page.contains("javascript"), "{page}");
        assert!(
            page.contains("<h2>Evil</h2>") && page.contains("<h2>None</h2>"),
            "{page}"
        );
        assert_eq!(page.matches("<article").count(), 3);
    }

    #[tokio::test]
    async fn inline_templates_render_with_escaping() {
        let h = harness().await;
        let (status, page) = render(
            &h,
            json!({
                "template": "<ul>{% for x in items %}<li>{{ x.name | upper }}</li>{% endfor %}</ul>",
                "data": {"items": [{"name": "a"}, {"name": HOSTILE}]}
            }),
        )
        .await;
        assert_eq!(status, Status::Ok, "{page}");
        assert_eq!(
            page,
            "<ul><li>A</li><li>&lt;SCRIPT&gt;ALERT(1)&lt;&#x2f;SCRIPT&gt;</li></ul>"
        );
    }

    #[tokio::test]
    async fn undefined_variables_are_errors_but_may_be_tested() {
        let h = harness().await;
        let (status, text) = render(
            &h,
            json!({"template": "<p>{{ name }}</p>\n<p>{{ missing }}</p>", "data": {"name": "x"}}),
        )
        .await;
        assert_eq!(status, Status::Failed);
        assert!(
            text.contains("uses a value that data does not have at line 2"),
            "{text}"
        );
        let (status, page) = render(
            &h,
            json!({"template": "{% if missing %}yes{% else %}no{% endif %}"}),
        )
        .await;
        assert_eq!((status, page.as_str()), (Status::Ok, "no"));
    }

    #[tokio::test]
    async fn a_misspelt_builtin_name_lists_the_builtins() {
        let h = harness().await;
        let (status, text) = render(&h, json!({"template": "reprot"})).await;
        assert_eq!(status, Status::Failed);
        assert!(
            text.contains("no built-in template named \"reprot\"")
                && text.contains("report (title, summary, sections[{heading, body}])")
                && text.contains("card_list"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn syntax_errors_name_the_line() {
        let h = harness().await;
        let (status, text) = render(&h, json!({"template": "ok\n{% for x in %}"})).await;
        assert_eq!(status, Status::Failed);
        assert!(text.contains("does not parse at line 2"), "{text}");
    }

    #[tokio::test]
    async fn a_fuel_exhausting_template_stops_cleanly_and_quickly() {
        let h = harness().await;
        let started = Instant::now();
        let (status, text) = render(
            &h,
            json!({"template": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}),
        )
        .await;
        assert_eq!(status, Status::Failed);
        assert!(text.contains("did too much work"), "{text}");
        eprintln!("fuel exhausted after {:?}", started.elapsed());
        assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn the_fuel_suffices_for_a_large_ordinary_table() {
        let h = harness().await;
        let rows: Vec<Vec<String>> = (0..2000)
            .map(|r| (0..5).map(|c| format!("r{r}c{c}")).collect())
            .collect();
        let started = Instant::now();
        let (status, page) = render(
            &h,
            json!({"template": "table", "data": {"columns": ["a", "b", "c", "d", "e"], "rows": rows}}),
        )
        .await;
        eprintln!("2000x5 table rendered in {:?}", started.elapsed());
        assert_eq!(status, Status::Ok, "{page}");
        assert!(page.contains("<td>r1999c4</td>"));
    }

    #[tokio::test]
    async fn deep_recursion_stops_cleanly() {
        let h = harness().await;
        let (status, text) = render(
            &h,
            json!({"template": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"}),
        )
        .await;
        assert_eq!(status, Status::Failed, "{text}");
    }

    #[tokio::test]
    async fn oversize_template_data_and_output_are_refused() {
        let h = harness().await;
        let big = format!("<p>{}</p>", "x".repeat(TEMPLATE_CAP));
        let (status, text) = render(&h, json!({"template": big})).await;
        assert_eq!(status, Status::Failed);
        assert!(text.contains("over the 64.0 KiB limit"), "{text}");

        let rows: Vec<Vec<String>> = (0..2000).map(|_| vec!["y".repeat(600)]).collect();
        let (status, text) = render(&h, json!({"template": "table", "data": {"rows": rows}})).await;
        assert_eq!(status, Status::Failed);
        assert!(
            text.contains("data is 1.2 MiB as JSON, over the 1.0 MiB limit"),
            "{text}"
        );

        let (status, text) = render(
            &h,
            json!({"template": "{% for i in range(30000) %}{{ s }}{% endfor %}", "data": {"s": "z".repeat(100)}}),
        )
        .await;
        assert_eq!(status, Status::Failed);
        assert!(
            text.contains("the page grew over the 1.0 MiB limit"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn data_must_be_an_object() {
        let h = harness().await;
        // The schema says object, so the engine refuses it before the tool runs.
        let (status, text) = render(&h, json!({"template": "report", "data": [1, 2]})).await;
        assert_eq!(status, Status::Invalid, "{text}");
        assert!(text.contains("/data"), "{text}");
    }
}
