//! Page bytes → text for fetch_page: charset decoding, main-content extraction (readability via
//! dom_smoothie), and the three output types (Markdown, cleaned HTML, a JSON outline).
//!
//! Every input is hostile: the parser sees at most [`MAX_PARSE_BYTES`], and a cheap byte scan
//! refuses trees deep or large enough to make html5ever's scope checks quadratic.

use dom_query::{Document, NodeRef};
use dom_smoothie::{Config, Readability, ReadabilityError, TextMode};
use encoding_rs::{Encoding, UTF_8, WINDOWS_1252};
use serde::{Deserialize, Serialize};
use serde_json::json;
use url::Url;

use super::furniture::{strip_furniture, strip_named_furniture};

/// Bytes of HTML handed to the parser; the rest of a larger page is cut (and the text says so).
pub const MAX_PARSE_BYTES: usize = 5 * 1024 * 1024;
/// Open elements beyond this nesting make the page "too deep" to parse as a tree.
const MAX_DEPTH: usize = 512;
/// Start tags beyond this count make the page "too large" to parse as a tree.
const MAX_ELEMENTS: usize = 150_000;
/// Links listed by the outline; the rest are counted.
const MAX_OUTLINE_LINKS: usize = 200;
/// Headings listed by the outline; the rest are counted.
const MAX_OUTLINE_HEADINGS: usize = 300;
/// Characters kept of a heading, link text or image alt text.
const MAX_LABEL_CHARS: usize = 120;
/// Where `<meta charset>` may appear (the HTML spec's prescan length).
const META_PRESCAN_BYTES: usize = 4096;

/// Elements that never carry main content; removed from cleaned HTML and the fallback body.
const NOISE_ELEMENTS: &str = "script, style, noscript, template, nav, footer, form, iframe, \
    frame, frameset, object, embed, applet, button, input, select, textarea, dialog, svg, canvas";

/// What fetch_page returns (`type` argument): `markdown`, `html` or `json` (the outline;
/// `outline` is accepted as an alias). `json` follows the seed's name for this type.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PageFormat {
    /// The main content as Markdown.
    #[default]
    Markdown,
    /// The main content as cleaned HTML (no scripts, styles, navigation, forms or handlers).
    Html,
    /// `{"title", "headings":[{level,text}], "links":[{text,url}]}` of the whole page.
    #[serde(rename = "json", alias = "outline")]
    Outline,
}

/// The extracted page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    /// The page title, when it has one.
    pub title: Option<String>,
    /// The page in the requested format, blank-line runs collapsed, no trailing whitespace.
    pub text: String,
}

/// Why a page could not be turned into text; each message is written for the model.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExtractError {
    /// Nothing readable at all (empty body, only scripts, binary data).
    #[error(
        "the page at {url} has no readable text (it may be empty, binary, or built by JavaScript); try another source for this information"
    )]
    NoText {
        /// The page's URL.
        url: String,
    },
    /// The tree is too deep or too large for the requested structured type.
    #[error(
        "the page at {url} is too deeply nested or too large ({why}) to return as {format}; fetch it with type \"markdown\" to get its plain text"
    )]
    TooComplex {
        /// The page's URL.
        url: String,
        /// What limit it broke.
        why: String,
        /// The requested type's name.
        format: &'static str,
    },
}

/// Page bytes → text: BOM, else Content-Type charset, else `<meta charset>`, else UTF-8/windows-1252.
pub fn decode_html(body: &[u8], content_type: Option<&str>) -> String {
    // The BOM wins over the header, as in browsers (WHATWG "decode"): a BOM is proof of the
    // encoding, a header is often a server default.
    if let Some((encoding, bom_len)) = Encoding::for_bom(body) {
        let (text, _) = encoding.decode_without_bom_handling(&body[bom_len..]);
        return text.into_owned();
    }
    let declared = content_type
        .and_then(charset_param)
        .and_then(|label| Encoding::for_label(label.as_bytes()))
        .or_else(|| meta_charset(&body[..body.len().min(META_PRESCAN_BYTES)]));
    if let Some(encoding) = declared {
        // A page cannot be UTF-16 without a BOM in practice; the spec maps such a meta to UTF-8.
        let encoding = if encoding == encoding_rs::UTF_16LE || encoding == encoding_rs::UTF_16BE {
            UTF_8
        } else {
            encoding.output_encoding()
        };
        let (text, _) = encoding.decode_without_bom_handling(body);
        return text.into_owned();
    }
    match std::str::from_utf8(body) {
        Ok(text) => text.to_string(),
        Err(_) => WINDOWS_1252
            .decode_without_bom_handling(body)
            .0
            .into_owned(),
    }
}

/// The `charset=` parameter of a Content-Type value.
fn charset_param(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("charset") {
            return None;
        }
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'').trim();
        (!value.is_empty()).then(|| value.to_string())
    })
}

/// The encoding named by `<meta charset=…>` or `<meta http-equiv content="…; charset=…">`.
fn meta_charset(head: &[u8]) -> Option<&'static Encoding> {
    let lower = head.to_ascii_lowercase();
    let mut from = 0;
    while let Some(pos) = memchr::memmem::find(&lower[from..], b"<meta") {
        let start = from + pos;
        let end = memchr::memchr(b'>', &lower[start..]).map_or(lower.len(), |e| start + e);
        let tag = &lower[start..end];
        if let Some(cs) = memchr::memmem::find(tag, b"charset") {
            let rest = &tag[cs + "charset".len()..];
            let rest = rest.trim_ascii_start();
            if let Some(rest) = rest.strip_prefix(b"=") {
                let rest = rest.trim_ascii_start();
                let rest = rest
                    .strip_prefix(b"\"")
                    .or_else(|| rest.strip_prefix(b"'"))
                    .unwrap_or(rest);
                let label_len = rest
                    .iter()
                    .position(|b| !(b.is_ascii_alphanumeric() || b"-_:.".contains(b)))
                    .unwrap_or(rest.len());
                if let Some(encoding) = Encoding::for_label(&rest[..label_len]) {
                    return Some(encoding);
                }
            }
        }
        from = end.max(start + 1);
    }
    None
}

/// Turn a decoded page into the requested format; `url` is the page's address (for links).
pub fn extract(
    html: &str,
    url: &str,
    format: PageFormat,
    keep_links: bool,
) -> Result<Extracted, ExtractError> {
    let total = html.len();
    let html = cut_at_char_boundary(html, MAX_PARSE_BYTES);
    let cut_note = (html.len() < total).then(|| {
        format!(
            "Note: the page is {:.1} MiB; only its first {:.1} MiB were read.",
            mib(total),
            mib(html.len())
        )
    });
    let base = Url::parse(url).ok().filter(|u| u.has_host());

    let shape = TagShape::scan(html);
    let (title, body) = if let Some(why) = shape.too_complex() {
        match format {
            PageFormat::Markdown => {
                let text = tidy(&plain_text(html));
                if !has_words(&text) {
                    return Err(ExtractError::NoText {
                        url: url.to_string(),
                    });
                }
                let note = format!(
                    "Note: the page is too deeply nested or too large ({why}) to extract its structure; this is its plain text."
                );
                (None, join_notes(&[Some(note)], &text))
            }
            PageFormat::Html | PageFormat::Outline => {
                return Err(ExtractError::TooComplex {
                    url: url.to_string(),
                    why,
                    format: if format == PageFormat::Html {
                        "html"
                    } else {
                        "json"
                    },
                });
            }
        }
    } else {
        match format {
            PageFormat::Markdown => {
                let (title, content) = main_content(html, base.as_ref());
                let doc = Document::from(content);
                // Readability's last-resort attempt keeps the whole body, menus included.
                doc.select(NOISE_ELEMENTS).remove();
                strip_furniture(&doc);
                strip_permalinks(&doc);
                rewrite_links(&doc, base.as_ref(), keep_links);
                (title, relax_escapes(&doc.md(None)))
            }
            PageFormat::Html => {
                let (title, content) = main_content(html, base.as_ref());
                let doc = Document::from(content);
                strip_furniture(&doc);
                (title, clean_html(&doc.html(), base.as_ref()))
            }
            PageFormat::Outline => {
                let doc = Document::from(html);
                let title = document_title(&doc);
                (title.clone(), outline(&doc, title, base.as_ref()))
            }
        }
    };

    let body = tidy(&body);
    if body.is_empty() || (format != PageFormat::Outline && !has_words(&body)) {
        return Err(ExtractError::NoText {
            url: url.to_string(),
        });
    }
    Ok(Extracted {
        title,
        text: join_notes(&[cut_note], &body),
    })
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn join_notes(notes: &[Option<String>], body: &str) -> String {
    let mut out = String::new();
    for note in notes.iter().flatten() {
        out.push_str(note);
        out.push_str("\n\n");
    }
    out.push_str(body);
    out
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub(crate) fn cut_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn has_words(text: &str) -> bool {
    text.chars().any(char::is_alphanumeric)
}

/// The page's title and the HTML of its main content: readability's article, or the cleaned
/// body when readability finds none.
fn main_content(html: &str, base: Option<&Url>) -> (Option<String>, String) {
    let cfg = Config {
        // We render the article's HTML ourselves (links rewritten on the DOM, not by regex
        // over Markdown), so readability's own text output is not needed.
        text_mode: TextMode::Raw,
        // Class names tell page furniture from the story (see furniture.rs).
        keep_classes: true,
        max_elements_to_parse: MAX_ELEMENTS,
        ..Config::default()
    };
    let page = Document::from(html);
    strip_named_furniture(&page);
    let readability = Readability::with_document(page, base.map(Url::as_str), Some(cfg));
    let article = readability.and_then(|mut r| r.parse());
    match article {
        Ok(article) if has_words(&article.text_content) => {
            let title = non_empty(article.title.trim());
            (title, article.content.to_string())
        }
        Ok(_)
        | Err(
            ReadabilityError::GrabFailed
            | ReadabilityError::TooManyElements(..)
            | ReadabilityError::BadDocumentURL,
        ) => {
            let doc = Document::from(html);
            let title = document_title(&doc);
            doc.select(NOISE_ELEMENTS).remove();
            doc.select("header, aside, [role=navigation], [aria-hidden=true]")
                .remove();
            let body = doc.select("body");
            let content = if body.exists() {
                body.inner_html().to_string()
            } else {
                doc.html().to_string()
            };
            (title, content)
        }
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn document_title(doc: &Document) -> Option<String> {
    let title = doc.select("title").text();
    let title = collapse_ws(&title);
    if title.is_empty() {
        let h1 = collapse_ws(&doc.select("h1").text());
        non_empty(&h1)
    } else {
        Some(title)
    }
}

/// Heading anchors like `<a href="#x">¶</a>` that would otherwise end every heading in "¶".
fn strip_permalinks(doc: &Document) {
    for a in doc.select("a[href*='#']").nodes() {
        if matches!(a.text().trim(), "#" | "¶" | "§" | "🔗") {
            a.remove_from_parent();
        }
    }
}

/// `keep_links`: links and images made absolute, alt text shortened. Otherwise links become
/// their text and images go (their alt text is mostly "logo" or a file name).
fn rewrite_links(doc: &Document, base: Option<&Url>, keep_links: bool) {
    let root = doc.root();
    if !keep_links {
        doc.select("img, picture, figure > source").remove();
        root.strip_elements(&["a"]);
        return;
    }
    for a in doc.select("a[href]").nodes() {
        match a.attr("href").and_then(|h| absolute(base, &h)) {
            Some(href) => a.set_attr("href", &href),
            None => a.remove_attr("href"),
        }
    }
    for img in doc.select("img").nodes() {
        match img.attr("src").and_then(|s| absolute(base, &s)) {
            Some(src) => {
                img.set_attr("src", &src);
                if let Some(alt) = img.attr("alt") {
                    img.set_attr("alt", &shorten(&collapse_ws(&alt), 80));
                }
            }
            None => img.remove_from_parent(),
        }
    }
    strip_nameless_links(doc);
}

/// Links the Markdown writer would render as `[](url)`: anchors with no text.
fn strip_nameless_links(doc: &Document) {
    for a in doc.select("a").nodes() {
        if a.text().trim().is_empty() && !a.descendants_it().any(|n| n.has_name("img")) {
            a.remove_from_parent();
        }
    }
}

/// An http(s) URL for `href` resolved against the page; `None` for script, data and mail links.
fn absolute(base: Option<&Url>, href: &str) -> Option<String> {
    let href = href.trim();
    if href.is_empty() {
        return None;
    }
    let resolved = match base {
        Some(base) => base.join(href).ok()?,
        None => Url::parse(href).ok()?,
    };
    matches!(resolved.scheme(), "http" | "https" | "ftp").then(|| resolved.to_string())
}

/// Cleaned HTML of the main content: no scripts, styles, navigation, forms, comments or
/// event-handler attributes; links absolute.
fn clean_html(content: &str, base: Option<&Url>) -> String {
    let doc = Document::from(content);
    doc.select(NOISE_ELEMENTS).remove();
    strip_permalinks(&doc);
    let root = doc.root();
    let comments: Vec<NodeRef> = root.descendants_it().filter(|n| n.is_comment()).collect();
    for comment in comments {
        comment.remove_from_parent();
    }
    // Collected first: the iterator borrows the tree, and the edits below need it mutably.
    let elements: Vec<NodeRef> = root.descendants_it().filter(|n| n.is_element()).collect();
    for node in elements {
        let names: Vec<String> = node
            .attrs()
            .iter()
            .map(|a| a.name.local.to_string())
            .collect();
        for name in names {
            let lower = name.to_ascii_lowercase();
            // Class names were kept to find furniture; they mean nothing to the reader.
            if lower.starts_with("on") || matches!(lower.as_str(), "style" | "srcset" | "class") {
                node.remove_attr(&name);
            }
        }
        for attr in ["href", "src"] {
            if let Some(value) = node.attr(attr) {
                match absolute(base, &value) {
                    Some(v) => node.set_attr(attr, &v),
                    None => node.remove_attr(attr),
                }
            }
        }
    }
    let body = doc.select("body");
    if body.exists() {
        body.inner_html().to_string()
    } else {
        doc.html().to_string()
    }
}

#[derive(Serialize)]
struct Heading {
    level: u8,
    text: String,
}

#[derive(Serialize)]
struct Link {
    text: String,
    url: String,
}

/// The JSON outline of the whole page: title, headings in order, distinct links (capped).
fn outline(doc: &Document, title: Option<String>, base: Option<&Url>) -> String {
    doc.select("script, style, noscript, template").remove();
    let mut headings = Vec::new();
    let mut headings_total = 0usize;
    for h in doc.select("h1, h2, h3, h4, h5, h6").nodes() {
        let text = shorten(&collapse_ws(&h.text()), MAX_LABEL_CHARS);
        if text.is_empty() {
            continue;
        }
        headings_total += 1;
        if headings.len() < MAX_OUTLINE_HEADINGS {
            let level = h
                .node_name()
                .and_then(|n| n.get(1..).and_then(|d| d.parse::<u8>().ok()))
                .unwrap_or(1);
            headings.push(Heading { level, text });
        }
    }
    let page = base.map(|b| {
        let mut b = b.clone();
        b.set_fragment(None);
        b.to_string()
    });
    let mut seen = std::collections::HashSet::new();
    let mut links = Vec::new();
    let mut links_total = 0usize;
    for a in doc.select("a[href]").nodes() {
        let Some(href) = a.attr("href") else { continue };
        let Some(url) = absolute(base, &href) else {
            continue;
        };
        // Anchors into the page itself repeat the headings.
        if page.as_deref() == Some(url.split('#').next().unwrap_or("")) && url.contains('#') {
            continue;
        }
        if !seen.insert(url.clone()) {
            continue;
        }
        links_total += 1;
        if links.len() < MAX_OUTLINE_LINKS {
            let text = shorten(&collapse_ws(&a.text()), MAX_LABEL_CHARS);
            links.push(Link { text, url });
        }
    }
    let mut value = json!({ "title": title, "headings": headings, "links": links });
    if headings_total > headings.len() {
        value["headings_omitted"] = json!(headings_total - headings.len());
    }
    if links_total > links.len() {
        value["links_omitted"] = json!(links_total - links.len());
    }
    value.to_string()
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn shorten(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

/// The Markdown writer escapes `` \ ` * _ [ ] < | ~ `` wherever they occur, which splits words
/// the model reads (`snake\_case`, `\[1\]`, `a \< b`). This keeps an escape only where
/// Markdown would misread the bare character, and leaves code untouched:
/// `_` inside a word and `*` between spaces never emphasise, a lone `~` never strikes through,
/// `|` only matters in a table row, `<` only before a tag or autolink, and brackets only where
/// they could make a link (a line with a link keeps them all).
fn relax_escapes(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut in_fence = false;
    for (n, line) in md.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let start = line.trim_start();
        if start.starts_with("```") || start.starts_with("~~~") {
            in_fence = !in_fence;
        }
        if in_fence || start.starts_with("```") || start.starts_with("~~~") || !line.contains('\\')
        {
            out.push_str(line);
            continue;
        }
        let table_row = start.starts_with('|');
        let has_link = line.contains("](");
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '`' {
                // A code span runs to the next run of as many backticks; copied as it is.
                let run = chars[i..].iter().take_while(|&&b| b == '`').count();
                let close = (i + run..chars.len()).find(|&j| {
                    chars[j..].iter().take_while(|&&b| b == '`').count() == run
                        && (j == 0 || chars[j - 1] != '`')
                });
                let end = close.map_or(i + run, |j| j + run);
                out.extend(&chars[i..end]);
                i = end;
                continue;
            }
            if c != '\\' || i + 1 >= chars.len() {
                out.push(c);
                i += 1;
                continue;
            }
            let escaped = chars[i + 1];
            let before = out.chars().next_back();
            // The next character as written, past its own escape.
            let after = match chars.get(i + 2) {
                Some('\\') => chars.get(i + 3).copied(),
                other => other.copied(),
            };
            let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
            let needless = match escaped {
                '_' => word(before) && word(after),
                '*' => before == Some(' ') && after == Some(' '),
                '~' => before != Some('~') && after != Some('~'),
                '|' => !table_row,
                '<' => !after.is_some_and(|a| a.is_ascii_alphabetic() || "/!?".contains(a)),
                '[' | ']' => !has_link,
                _ => false,
            };
            if !needless {
                out.push('\\');
            }
            out.push(escaped);
            i += 2;
        }
    }
    out
}

/// Trailing whitespace off every line, runs of blank lines collapsed to one, no blank lines
/// at either end.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0usize;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
            if blank_run > 0 {
                out.push('\n');
            }
        }
        blank_run = 0;
        out.push_str(line);
    }
    out
}

/// How the page's tags nest, from a linear byte scan (no tree is built).
#[derive(Debug, Default, PartialEq, Eq)]
struct TagShape {
    max_depth: usize,
    elements: usize,
}

/// Void elements, and elements whose end tag is implied by a sibling or parent (an unclosed
/// `<p>` or `<li>` does not nest in the parser, so it must not count as nesting here).
const NOT_NESTING: [&str; 31] = [
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr", "param", "keygen", "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th",
    "thead", "tbody", "tfoot", "colgroup", "html", "head", "body",
];
/// Containers an HTML parser opens even when written `<div/>`.
const HTML_CONTAINERS: [&str; 20] = [
    "div",
    "span",
    "section",
    "article",
    "main",
    "aside",
    "nav",
    "header",
    "footer",
    "table",
    "ul",
    "ol",
    "dl",
    "a",
    "b",
    "i",
    "em",
    "strong",
    "font",
    "blockquote",
];
/// Elements whose content is raw text up to their end tag.
const RAW_TEXT: [&str; 6] = ["script", "style", "textarea", "title", "xmp", "noscript"];

impl TagShape {
    fn scan(html: &str) -> Self {
        let bytes = html.as_bytes();
        let mut shape = TagShape::default();
        let mut depth = 0usize;
        let mut i = 0usize;
        while let Some(off) = memchr::memchr(b'<', &bytes[i..]) {
            let start = i + off;
            let rest = &bytes[start + 1..];
            if rest.starts_with(b"!--") {
                i = memchr::memmem::find(&bytes[start..], b"-->")
                    .map_or(bytes.len(), |e| start + e + 3);
                continue;
            }
            let Some(end) = memchr::memchr(b'>', rest).map(|e| start + 1 + e) else {
                break;
            };
            i = end + 1;
            let (closing, name_bytes) = match rest.first() {
                Some(b'/') => (true, &rest[1..]),
                Some(b) if b.is_ascii_alphabetic() => (false, rest),
                _ => continue,
            };
            let name_len = name_bytes
                .iter()
                .position(|b| !(b.is_ascii_alphanumeric() || *b == b'-' || *b == b':'))
                .unwrap_or(name_bytes.len());
            let name = &name_bytes[..name_len];
            let is = |list: &[&str]| list.iter().any(|n| n.as_bytes().eq_ignore_ascii_case(name));
            if closing {
                if !is(&NOT_NESTING) {
                    depth = depth.saturating_sub(1);
                }
                continue;
            }
            shape.elements += 1;
            if is(&RAW_TEXT) {
                i = find_end_tag(bytes, i, name);
                continue;
            }
            let self_closing = bytes[end - 1] == b'/';
            if !is(&NOT_NESTING) && (!self_closing || is(&HTML_CONTAINERS)) {
                depth += 1;
                shape.max_depth = shape.max_depth.max(depth);
            }
        }
        shape
    }

    fn too_complex(&self) -> Option<String> {
        if self.max_depth > MAX_DEPTH {
            Some(format!(
                "{} nested elements, limit {MAX_DEPTH}",
                self.max_depth
            ))
        } else if self.elements > MAX_ELEMENTS {
            Some(format!("{} elements, limit {MAX_ELEMENTS}", self.elements))
        } else {
            None
        }
    }
}

/// The index just past `</name…>` at or after `from`, or the end of `bytes`.
fn find_end_tag(bytes: &[u8], from: usize, name: &[u8]) -> usize {
    let mut i = from;
    while let Some(off) = memchr::memmem::find(&bytes[i..], b"</") {
        let at = i + off + 2;
        let candidate = &bytes[at..bytes.len().min(at + name.len())];
        if candidate.eq_ignore_ascii_case(name) {
            return memchr::memchr(b'>', &bytes[at..]).map_or(bytes.len(), |e| at + e + 1);
        }
        i = at;
    }
    bytes.len()
}

/// The text of a page without building a tree: tags dropped (block tags become line breaks),
/// scripts and styles skipped, the common entities decoded.
fn plain_text(html: &str) -> String {
    const BLOCK: [&str; 16] = [
        "p",
        "div",
        "br",
        "li",
        "tr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "section",
        "article",
        "pre",
        "table",
        "blockquote",
    ];
    let bytes = html.as_bytes();
    let mut out = String::with_capacity(html.len() / 2);
    let mut i = 0usize;
    while i < bytes.len() {
        let Some(off) = memchr::memchr(b'<', &bytes[i..]) else {
            push_text(&mut out, &html[i..]);
            break;
        };
        let start = i + off;
        push_text(&mut out, &html[i..start]);
        let rest = &bytes[start + 1..];
        if rest.starts_with(b"!--") {
            i = memchr::memmem::find(&bytes[start..], b"-->")
                .map_or(bytes.len(), |e| start + e + 3);
            continue;
        }
        let Some(end) = memchr::memchr(b'>', rest).map(|e| start + 1 + e) else {
            break;
        };
        i = end + 1;
        let name_bytes = rest.strip_prefix(b"/").unwrap_or(rest);
        let name_len = name_bytes
            .iter()
            .position(|b| !b.is_ascii_alphanumeric())
            .unwrap_or(name_bytes.len());
        let name = &name_bytes[..name_len];
        let is = |list: &[&str]| list.iter().any(|n| n.as_bytes().eq_ignore_ascii_case(name));
        if !rest.starts_with(b"/") && (is(&RAW_TEXT) && !name.eq_ignore_ascii_case(b"title")) {
            i = find_end_tag(bytes, i, name);
        } else if is(&BLOCK) {
            out.push('\n');
        }
    }
    out
}

fn push_text(out: &mut String, text: &str) {
    if text.trim().is_empty() {
        if !text.is_empty() && !out.ends_with([' ', '\n']) {
            out.push(' ');
        }
        return;
    }
    let collapsed = collapse_ws(text);
    if text.starts_with(char::is_whitespace) && !out.ends_with([' ', '\n']) {
        out.push(' ');
    }
    out.push_str(&decode_entities(&collapsed));
    if text.ends_with(char::is_whitespace) {
        out.push(' ');
    }
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&apos;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&")
}

#[cfg(test)]
#[path = "extract_tests.rs"]
mod tests;
