use super::*;
use pretty_assertions::assert_eq;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PAGE_URL: &str = "https://docs.example.org/guide/page.html";

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/web/fixtures")
}

fn fixture(name: &str) -> String {
    let body = std::fs::read(fixtures_dir().join(format!("{name}.html"))).unwrap();
    decode_html(&body, Some("text/html"))
}

/// Per fixture: a phrase of its main text, and phrases of its navigation, header, footer or
/// sidebar that must not survive extraction (each checked in the source page first).
const FIXTURES: &[(&str, &str, &[&str])] = &[
    (
        "expat_reference",
        "It's the underlying XML parser for the open source Mozilla project",
        &[
            "Found a bug in the documentation?",
            "Please file a bug report.",
        ],
    ),
    (
        "httplib2_http_objects",
        "The maximum number of redirect to follow before raising an exception",
        &[
            "Release 0.3, documentation updated on Mar 8, 2007.",
            "Previous:",
            "Next:",
        ],
    ),
    (
        "libffi_closure_api",
        "This facility is called the *closure API*",
        &["Previous:", "Next:", "Closure Example"],
    ),
    (
        "libffi_the_basics",
        "assumes that you have a pointer to the function you wish to call",
        &["Next:", "Simple Example"],
    ),
    (
        "libxslt_extensions",
        "providing new extension functions which can be called from XPath expressions",
        &[
            "Main Menu",
            "Reporting bugs and getting help",
            "The XSLT C library for GNOME",
        ],
    ),
    (
        "libxslt_internals",
        "This document describes the processing of",
        &[
            "Main Menu",
            "Reporting bugs and getting help",
            "Related links",
        ],
    ),
    (
        "node_dns",
        "The `node:dns` module enables name resolution.",
        &[
            "About this documentation",
            "Assertion testing",
            "C++ addons",
        ],
    ),
    (
        "node_documentation",
        "Node.js is a JavaScript runtime built on the V8 JavaScript engine.",
        &[
            "Usage and example",
            "C++ embedder API",
            "Command-line options",
        ],
    ),
    (
        "node_path",
        "The `node:path` module provides utilities for working with file and directory paths.",
        &[
            "About this documentation",
            "Asynchronous context tracking",
            "Async hooks",
        ],
    ),
    (
        "node_readline",
        "one line at a time",
        &[
            "About this documentation",
            "Assertion testing",
            "C/C++ addons with Node-API",
        ],
    ),
    (
        "npm_audit",
        "The audit command submits a description of the dependencies configured in your project",
        &["Edit this page on GitHub", "@11.19.1"],
    ),
    (
        "npm_ci",
        "it's meant to be used in automated environments such as test platforms",
        &["Edit this page on GitHub", "Clean install a project"],
    ),
    (
        "npm_scripts",
        "supports a number of built-in scripts and their preset life cycle events",
        &[
            "Edit this page on GitHub",
            "How npm handles the \"scripts\" field",
        ],
    ),
    (
        "python_idle_help",
        "IDLE is Python’s Integrated Development and Learning Environment.",
        &["File menu (Shell and Editor)", "Theme", "¶"],
    ),
    (
        "rust_book_ownership",
        "*Ownership* is a set of rules that govern how a Rust program manages memory.",
        &[
            "Keyboard shortcuts",
            "to navigate between chapters",
            "to search in the book",
        ],
    ),
    (
        "rust_book_result",
        "the `Result` enum is defined as having two variants, `Ok` and `Err`",
        &["Keyboard shortcuts", "to show this help"],
    ),
    (
        "rust_book_threads",
        "Splitting the computation in your program into multiple threads",
        &["Keyboard shortcuts", "to hide this help"],
    ),
    (
        "rust_by_example_option_unwrap",
        "let’s instead have the compiler point out cases where",
        &["Keyboard shortcuts", "Option & unwrap - Rust By Example"],
    ),
    (
        "rust_cargo_dependencies",
        "is the Rust community’s central *package registry*",
        &[
            "Keyboard shortcuts",
            "to hide this help",
            "Dependencies - The Cargo Book",
        ],
    ),
    (
        "rust_edition_disjoint_capture",
        "now captures only `a.x` instead of `a`.",
        &["Keyboard shortcuts", "to navigate between chapters"],
    ),
    (
        "rust_nomicon_races",
        "Safe Rust guarantees an absence of data races",
        &["Keyboard shortcuts", "Races - The Rustonomicon"],
    ),
    (
        "rust_std_collections",
        "you should probably just use `Vec` or `HashMap`",
        &["Module Items", "In crate std", "(59807616e 2026-04-14)"],
    ),
];

/// Snapshots keep the head of each page so the repository stays small.
const SNAPSHOT_CHARS: usize = 4000;

#[test]
fn fixtures_keep_main_text_and_drop_navigation() {
    let on_disk: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "html"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .collect();
    let mut listed: Vec<String> = FIXTURES.iter().map(|f| f.0.to_string()).collect();
    let mut on_disk_sorted = on_disk.clone();
    on_disk_sorted.sort();
    listed.sort();
    assert_eq!(
        listed, on_disk_sorted,
        "every fixture needs a row in FIXTURES"
    );

    for (name, must, must_not) in FIXTURES {
        let html = fixture(name);
        for phrase in *must_not {
            assert!(
                html.contains(phrase)
                    || html.contains(&phrase.replace('&', "&amp;"))
                    || html.contains(&phrase.replace('"', "&quot;")),
                "{name}: the must-not phrase {phrase:?} is not in the source page, so the check proves nothing"
            );
        }
        let page = extract(&html, PAGE_URL, PageFormat::Markdown, false).unwrap();
        assert!(page.text.contains(must), "{name}: lost {must:?}");
        for phrase in *must_not {
            assert!(
                !page.text.contains(phrase),
                "{name}: kept navigation {phrase:?}"
            );
        }
        assert!(page.title.is_some(), "{name}: no title");
        assert!(!page.text.contains("\n\n\n"), "{name}: blank-line run");
        assert!(
            page.text.lines().all(|l| l == l.trim_end()),
            "{name}: trailing whitespace"
        );
        assert!(
            !page.text.contains("](http"),
            "{name}: a link survived keep_links=false"
        );

        let head: String = page.text.chars().take(SNAPSHOT_CHARS).collect();
        insta::assert_snapshot!(format!("markdown_{name}"), head);
    }
}

#[test]
fn fixtures_in_every_format_stay_valid() {
    for (name, _, _) in FIXTURES {
        let html = fixture(name);
        let linked = extract(&html, PAGE_URL, PageFormat::Markdown, true).unwrap();
        assert!(
            !linked.text.contains("](/") && !linked.text.contains("](#"),
            "{name}: relative link kept"
        );

        let cleaned = extract(&html, PAGE_URL, PageFormat::Html, false)
            .unwrap()
            .text;
        for banned in [
            "<script",
            "<style",
            "<nav",
            "<footer",
            "<form",
            "<!--",
            " onclick=",
            " onload=",
        ] {
            assert!(!cleaned.contains(banned), "{name}: html kept {banned}");
        }

        let outline = extract(&html, PAGE_URL, PageFormat::Outline, false)
            .unwrap()
            .text;
        let value: serde_json::Value = serde_json::from_str(&outline).unwrap();
        let links = value["links"].as_array().unwrap();
        assert!(links.len() <= 200, "{name}");
        for link in links {
            let url = link["url"].as_str().unwrap();
            assert!(
                url.starts_with("http://")
                    || url.starts_with("https://")
                    || url.starts_with("ftp://"),
                "{name}: {url}"
            );
        }
        assert!(value["headings"].as_array().is_some(), "{name}");
    }
}

fn article(body: &str) -> String {
    format!(
        "<html><head><title>Tide tables</title></head><body>\
         <nav><a href=\"/\">Home</a> <a href=\"/about\">About</a></nav>\
         <main><article><h1>Tide tables</h1>{body}</article></main>\
         <footer>Copyright 2026 Harbour Office</footer></body></html>"
    )
}

const TIDE_PARAGRAPH: &str = "<p>High water at the harbour mouth comes about forty minutes \
    before high water at the inner quay, because the channel narrows and slows the flood. \
    Plan departures on the last of the ebb and read the <a href=\"../tables/2026.html\">full \
    tables</a> before you go, or see <a href=\"https://tides.example.net/x\">the national \
    service</a>.</p><p>Spring tides run two knots in the narrows; neap tides barely one. Keep \
    to the marked channel at low water, where the bank dries to half a metre.</p>\
    <p><img src=\"/img/chart.png\" alt=\"Chart of the harbour approaches with the drying bank \
    shaded in green and the channel buoys marked in red and green along its full length\"></p>";

#[test]
fn markdown_drops_links_unless_asked() {
    let html = article(TIDE_PARAGRAPH);
    let plain = extract(&html, PAGE_URL, PageFormat::Markdown, false).unwrap();
    assert_eq!(
        plain,
        Extracted {
            title: Some("Tide tables".to_string()),
            text: "High water at the harbour mouth comes about forty minutes before high water at the inner quay, because the channel narrows and slows the flood. Plan departures on the last of the ebb and read the full tables before you go, or see the national service.\n\nSpring tides run two knots in the narrows; neap tides barely one. Keep to the marked channel at low water, where the bank dries to half a metre.".to_string(),
        }
    );
}

#[test]
fn markdown_keeps_absolute_links_and_short_alt_text_when_asked() {
    let html = article(TIDE_PARAGRAPH);
    let linked = extract(&html, PAGE_URL, PageFormat::Markdown, true).unwrap();
    assert_eq!(
        linked.text,
        "High water at the harbour mouth comes about forty minutes before high water at the inner quay, because the channel narrows and slows the flood. Plan departures on the last of the ebb and read the [full tables](https://docs.example.org/tables/2026.html) before you go, or see [the national service](https://tides.example.net/x).\n\nSpring tides run two knots in the narrows; neap tides barely one. Keep to the marked channel at low water, where the bank dries to half a metre.\n\n![Chart of the harbour approaches with the drying bank shaded in green and the cha…](https://docs.example.org/img/chart.png)"
    );
}

#[test]
fn html_is_cleaned_of_scripts_handlers_comments_and_forms() {
    let html = article(
        "<p onclick=\"steal()\" style=\"color:red\">Slack water lasts about twenty minutes at \
         neaps and almost nothing at springs, so time the crossing of the bar with care and \
         allow for the wind against tide that builds short steep seas on the ebb.</p>\
         <!-- tracking pixel --><script>steal()</script><form><input name=q></form>\
         <p>Moorings are allocated by the harbour office; <a href=\"moorings.html\" \
         onmouseover=\"x()\">apply here</a> and <a href=\"javascript:alert(1)\">not here</a>. \
         Visitors raft up on the north wall, three deep at most, and pay at the kiosk.</p>",
    );
    let cleaned = extract(&html, PAGE_URL, PageFormat::Html, false).unwrap();
    assert_eq!(cleaned.title.as_deref(), Some("Tide tables"));
    assert_eq!(
        cleaned.text,
        "<div id=\"readability-page-1\"><div><article><p>Slack water lasts about twenty minutes at neaps and almost nothing at springs, so time the crossing of the bar with care and allow for the wind against tide that builds short steep seas on the ebb.</p><p>Moorings are allocated by the harbour office; <a href=\"https://docs.example.org/guide/moorings.html\">apply here</a> and not here. Visitors raft up on the north wall, three deep at most, and pay at the kiosk.</p></article></div></div>"
    );
}

#[test]
fn outline_lists_headings_and_distinct_absolute_links() {
    let html = "<html><head><title>Harbour guide</title><script>var h = '<h2>no</h2>';</script></head><body>\
        <nav><a href=\"/\">Home</a><a href=\"/\">Home again</a><a href=\"#top\">Top</a>\
        <a href=\"mailto:office@example.org\">Mail</a></nav>\
        <h1>Harbour   guide</h1><h2>Approach</h2><p>See <a href=\"charts/a.html\">chart A</a>.</p>\
        <h3>At night</h3><h2></h2><a href=\"https://other.example.net/lights\">Lights list</a>\
        </body></html>";
    let outline = extract(html, PAGE_URL, PageFormat::Outline, false).unwrap();
    assert_eq!(outline.title.as_deref(), Some("Harbour guide"));
    let value: serde_json::Value = serde_json::from_str(&outline.text).unwrap();
    assert_eq!(
        value,
        serde_json::json!({
            "title": "Harbour guide",
            "headings": [
                {"level": 1, "text": "Harbour guide"},
                {"level": 2, "text": "Approach"},
                {"level": 3, "text": "At night"}
            ],
            "links": [
                {"text": "Home", "url": "https://docs.example.org/"},
                {"text": "chart A", "url": "https://docs.example.org/guide/charts/a.html"},
                {"text": "Lights list", "url": "https://other.example.net/lights"}
            ]
        })
    );
}

#[test]
fn outline_caps_links_and_counts_the_rest() {
    let links: String = (0..250)
        .map(|i| format!("<a href=\"/p/{i}\">page {i}</a>\n"))
        .collect();
    let html = format!("<html><head><title>Index</title></head><body>{links}</body></html>");
    let outline = extract(&html, PAGE_URL, PageFormat::Outline, false).unwrap();
    let value: serde_json::Value = serde_json::from_str(&outline.text).unwrap();
    let listed = value["links"].as_array().unwrap();
    assert_eq!(listed.len(), 200);
    assert_eq!(
        listed[199],
        serde_json::json!({"text": "page 199", "url": "https://docs.example.org/p/199"})
    );
    assert_eq!(value["links_omitted"], 50);
}

#[test]
fn page_format_names_follow_the_seed() {
    let names: Vec<PageFormat> =
        serde_json::from_str(r#"["markdown","html","json","outline"]"#).unwrap();
    assert_eq!(
        names,
        vec![
            PageFormat::Markdown,
            PageFormat::Html,
            PageFormat::Outline,
            PageFormat::Outline
        ]
    );
    assert_eq!(
        serde_json::to_string(&PageFormat::Outline).unwrap(),
        "\"json\""
    );
}

#[test]
fn decode_uses_the_content_type_charset() {
    let body = b"<p>caf\xe9 cr\xe8me</p>";
    assert_eq!(
        decode_html(body, Some("text/html; charset=ISO-8859-1")),
        "<p>café crème</p>"
    );
    assert_eq!(
        decode_html(body, Some("text/html;charset=\"windows-1252\"")),
        "<p>café crème</p>"
    );
}

#[test]
fn decode_prefers_a_bom_to_the_header() {
    let mut body = vec![0xFF, 0xFE];
    for unit in "<p>żółw</p>".encode_utf16() {
        body.extend_from_slice(&unit.to_le_bytes());
    }
    assert_eq!(
        decode_html(&body, Some("text/html; charset=iso-8859-1")),
        "<p>żółw</p>"
    );
    assert_eq!(
        decode_html(b"\xEF\xBB\xBF<p>\xC3\xA9</p>", None),
        "<p>é</p>"
    );
}

#[test]
fn decode_reads_meta_charset_in_the_first_4_kib() {
    let (koi8, _, _) = encoding_rs::KOI8_R.encode("<p>Привет</p>");
    let mut body = b"<html><head><meta charset='koi8-r'></head><body>".to_vec();
    body.extend_from_slice(&koi8);
    assert_eq!(
        decode_html(&body, None),
        "<html><head><meta charset='koi8-r'></head><body><p>Привет</p>"
    );

    let mut http_equiv =
        b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=Shift_JIS\">".to_vec();
    http_equiv.extend_from_slice(&encoding_rs::SHIFT_JIS.encode("日本").0);
    assert!(decode_html(&http_equiv, Some("text/html")).ends_with("日本"));

    // Beyond the prescan window the declaration is ignored and the bytes decode as UTF-8.
    let mut late = vec![b' '; 5000];
    late.extend_from_slice("<meta charset=koi8-r><p>é</p>".as_bytes());
    assert!(decode_html(&late, None).ends_with("<p>é</p>"));
}

#[test]
fn decode_falls_back_to_windows_1252_for_invalid_utf8() {
    assert_eq!(
        decode_html(b"<p>\x93quoted\x94 \x80 5</p>", None),
        "<p>\u{201c}quoted\u{201d} € 5</p>"
    );
    assert_eq!(
        decode_html("<p>ünïcödé</p>".as_bytes(), None),
        "<p>ünïcödé</p>"
    );
}

#[test]
fn empty_and_script_only_pages_have_no_text() {
    for html in [
        "",
        "   ",
        "<html><body></body></html>",
        "<script>document.write('hi')</script>",
    ] {
        for format in [PageFormat::Markdown, PageFormat::Html] {
            assert_eq!(
                extract(html, PAGE_URL, format, false),
                Err(ExtractError::NoText {
                    url: PAGE_URL.to_string()
                }),
                "{html:?} {format:?}"
            );
        }
    }
}

#[test]
fn a_page_without_an_article_falls_back_to_its_body() {
    let html = "<html><body><nav><a href=/>Home</a></nav><div>Opening hours: 9 to 5.</div><footer>© 2026</footer></body></html>";
    let page = extract(html, PAGE_URL, PageFormat::Markdown, false).unwrap();
    assert_eq!(page.text, "Opening hours: 9 to 5.");
}

#[test]
fn a_huge_page_is_cut_and_says_so() {
    let paragraph = "<p>The quay wall was rebuilt in granite after the storm of 1896 and still carries the old mooring rings.</p>\n";
    let html = paragraph.repeat(6 * 1024 * 1024 / paragraph.len() + 1);
    let started = Instant::now();
    let page = extract(&html, PAGE_URL, PageFormat::Markdown, false).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let first_line = page.text.lines().next().unwrap();
    assert_eq!(
        first_line,
        "Note: the page is 6.0 MiB; only its first 5.0 MiB were read."
    );
}

#[test]
fn ten_mb_of_nested_divs_is_refused_as_a_tree_in_bounded_time() {
    let html = "<p>Surface text</p>".to_string() + &"<div>".repeat(2 * 1024 * 1024) + "deep text";
    let started = Instant::now();
    let page = extract(&html, PAGE_URL, PageFormat::Markdown, false).unwrap();
    assert_eq!(
        page.text,
        "Note: the page is 10.0 MiB; only its first 5.0 MiB were read.\n\n\
         Note: the page is too deeply nested or too large (1048572 nested elements, limit 512) \
         to extract its structure; this is its plain text.\n\nSurface text"
    );
    assert_eq!(
        extract(&html, PAGE_URL, PageFormat::Html, false),
        Err(ExtractError::TooComplex {
            url: PAGE_URL.to_string(),
            why: "1048572 nested elements, limit 512".to_string(),
            format: "html"
        })
    );
    let only_divs = "<div>".repeat(2 * 1024 * 1024);
    assert_eq!(
        extract(&only_divs, PAGE_URL, PageFormat::Markdown, false),
        Err(ExtractError::NoText {
            url: PAGE_URL.to_string()
        })
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn nesting_just_under_the_limit_extracts_on_a_default_thread_stack() {
    let words = "<p>Deep inside the page there is still a sentence worth reading, with enough words \
                 to count as content for the readability scorer and its thresholds.</p>";
    for (open, close) in [
        ("<div>", "</div>"),
        ("<ul><li>", "</li></ul>"),
        ("<blockquote>", "</blockquote>"),
        // Furniture names on every level: the furniture pass measures the tree once, and no
        // level may take the story with it.
        ("<div class=\"share-bar\">", "</div>"),
        ("<figure>", "</figure>"),
    ] {
        // The deepest trees the guard lets through (unclosed-able li adds a level it does not count).
        let depth = MAX_DEPTH - 2;
        let html = format!(
            "<html><body>{}{}{}</body></html>",
            open.repeat(depth),
            words.repeat(5),
            close.repeat(depth)
        );
        assert!(TagShape::scan(&html).too_complex().is_none(), "{open}");
        // A fresh 2 MiB thread, the size tokio gives its blocking pool.
        let result = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                [PageFormat::Markdown, PageFormat::Html, PageFormat::Outline].map(|format| {
                    extract(&html, PAGE_URL, format, true).map(|e| e.text.contains("worth reading"))
                })
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(result[0], Ok(true), "{open} markdown");
        assert_eq!(result[1], Ok(true), "{open} html");
        assert!(result[2].is_ok(), "{open} outline");
    }
}

#[test]
fn self_closed_divs_nest_like_open_ones() {
    let html = "<div/>".repeat(1000) + "<p>x</p>";
    assert_eq!(
        TagShape::scan(&html),
        TagShape {
            max_depth: 1000,
            elements: 1001
        }
    );
    let svg = "<svg>".to_string() + &"<path d='M0'/>".repeat(1000) + "</svg>";
    assert_eq!(
        TagShape::scan(&svg),
        TagShape {
            max_depth: 1,
            elements: 1001
        }
    );
}

#[test]
fn unclosed_tags_and_binary_garbage_do_not_panic() {
    let unclosed = "<html><body><table><tr><td><b><i><a href=x>".repeat(3000) + "words here";
    let started = Instant::now();
    for format in [PageFormat::Markdown, PageFormat::Html, PageFormat::Outline] {
        let _ = extract(&unclosed, PAGE_URL, format, true);
    }
    let mut garbage = Vec::with_capacity(1 << 20);
    let mut x: u32 = 0x1234_5678;
    for _ in 0..(1 << 20) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        garbage.push((x & 0xFF) as u8);
    }
    let text = decode_html(&garbage, None);
    for format in [PageFormat::Markdown, PageFormat::Html, PageFormat::Outline] {
        let _ = extract(&text, "not a url", format, false);
    }
    let formatting = "<b><i><u><s><em><strong><font><a href=#>".repeat(20_000) + "text";
    for format in [PageFormat::Markdown, PageFormat::Html, PageFormat::Outline] {
        let _ = extract(&formatting, PAGE_URL, format, false);
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn plain_text_skips_scripts_and_breaks_blocks() {
    assert_eq!(
        tidy(&plain_text(
            "<title>T</title><script>if (a<b) x()</script><p>one &amp; two</p><div>three<br>four</div><!-- <p>no</p> -->"
        )),
        "T\none & two\n\nthree\nfour"
    );
}

#[test]
#[ignore]
fn bench_extraction_throughput() {
    let pages: Vec<String> = FIXTURES.iter().map(|f| fixture(f.0)).collect();
    let bytes: usize = pages.iter().map(String::len).sum();
    let rounds = 5;
    let started = Instant::now();
    for _ in 0..rounds {
        for html in &pages {
            extract(html, PAGE_URL, PageFormat::Markdown, false).unwrap();
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let n = (pages.len() * rounds) as f64;
    println!(
        "markdown extraction: {} pages ({:.2} MB) x{rounds} in {secs:.2} s: {:.1} pages/s, {:.2} MB/s",
        pages.len(),
        bytes as f64 / 1e6,
        n / secs,
        (bytes * rounds) as f64 / 1e6 / secs
    );
}

#[test]
fn markdown_escapes_only_what_markdown_would_misread() {
    // Words and numbers the model reads come through as written.
    assert_eq!(
        relax_escapes(r"Choreographer\_Jeong cites \[1\] where a \< b, x \| y, \~5 km, 2 \* 3"),
        "Choreographer_Jeong cites [1] where a < b, x | y, ~5 km, 2 * 3"
    );
    // What would change the text's meaning as Markdown stays escaped.
    for kept in [
        r"\_emphasis\_ at word edges",
        r"a\*b\*c",
        r"\~\~struck\~\~",
        r"\<div\> and \<https://x\>",
        r"\# not a heading",
        r"\\_ a backslash",
        "| a \\| b |",
        r"[link \[1\]](https://example.com)",
    ] {
        assert_eq!(relax_escapes(kept), kept, "{kept}");
    }
    // Code is never touched.
    let code = "```\nlet a\\_b = 1;\n```\nand `x\\_y` inline, but y\\_z outside";
    assert_eq!(
        relax_escapes(code),
        "```\nlet a\\_b = 1;\n```\nand `x\\_y` inline, but y_z outside"
    );
    // End to end, through the extractor.
    let html = article(
        "<p>Choreographer_Jeong wrote that 3 < 4 and cited [12] in a long enough paragraph of \
         text for the extractor to keep it as the page's main content, with more words.</p>",
    );
    let page = extract(&html, PAGE_URL, PageFormat::Markdown, false).unwrap();
    assert!(
        page.text
            .starts_with("Choreographer_Jeong wrote that 3 < 4 and cited [12]"),
        "{}",
        page.text
    );
}
