//! The ResultFilter stage (DESIGN §3.7): fetch_page and search_web output passes through a
//! filter on every return, cached or fresh, so the model sees the part of a page that matters
//! to its call within a size budget. The built-in filter is deterministic; a model-backed one
//! (dispatch-model's `ModelResultFilter`, any configured model) is optional and falls back to
//! it on any failure.

use async_trait::async_trait;
use std::collections::{HashMap, HashSet};

use super::extract::cut_at_char_boundary;

/// The filtered text, and a one-line remark to show above it when the filter itself degraded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    /// What the model gets; when something was left out, its first line says what and why.
    pub text: String,
    /// Set when the configured filter failed and another one's result is shown instead.
    pub note: Option<String>,
}

/// Shrinks a fetched text to what the call is about, within `budget` bytes.
#[async_trait]
pub trait ResultFilter: Send + Sync {
    /// Filter `text` (Markdown) for `focus` (words from the call's query/focus) into `budget` bytes.
    async fn filter(&self, text: &str, focus: Option<&str>, budget: usize) -> Filtered;
}

/// Sections larger than this are split at block boundaries so ranking can pick their parts.
const MAX_SECTION_BYTES: usize = 2000;
/// How much of the focus the header quotes.
const MAX_FOCUS_CHARS_SHOWN: usize = 80;

/// The built-in filter: boilerplate out, sections ranked by focus words, kept until the budget.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeterministicFilter;

#[async_trait]
impl ResultFilter for DeterministicFilter {
    async fn filter(&self, text: &str, focus: Option<&str>, budget: usize) -> Filtered {
        self.apply(text, focus, budget)
    }
}

/// One unit of ranking: a heading's text and the blocks under it (or a part of them).
#[derive(Debug)]
struct Section {
    /// The heading line this section sits under, if any.
    heading: Option<String>,
    /// The text to emit; starts with the heading line unless this is a continuation.
    body: String,
    /// A later part of a split section; it gets its heading repeated when shown alone.
    continuation: bool,
}

impl Section {
    /// Bytes this section may take when emitted (a continuation may need its heading again).
    fn emitted_len(&self) -> usize {
        self.body.len() + self.continued_heading().map_or(0, |h| h.len() + 1)
    }

    fn continued_heading(&self) -> Option<String> {
        match (&self.heading, self.continuation) {
            (Some(h), true) => Some(format!("{h} (continued)")),
            _ => None,
        }
    }
}

impl DeterministicFilter {
    /// The filter itself, synchronous (the trait method only wraps it).
    pub fn apply(&self, text: &str, focus: Option<&str>, budget: usize) -> Filtered {
        let cleaned = strip_boilerplate(text);
        let sections = split_sections(&cleaned);
        let total = sections.len();
        let full: usize = join_len(sections.iter().map(|s| s.body.len()));
        if full <= budget {
            return Filtered {
                text: join(sections.iter().map(|s| s.body.clone())),
                note: None,
            };
        }

        let terms = focus.map(focus_terms).unwrap_or_default();
        let focus_shown = focus.map(|f| shorten(f.trim(), MAX_FOCUS_CHARS_SHOWN));
        let scores: Vec<u64> = sections.iter().map(|s| score(s, &terms)).collect();
        let ranked = !terms.is_empty() && scores.iter().any(|s| *s > 0);

        // Which sections are lists of short lines, judged once for the ordering, the header
        // and the fallback below.
        let is_list: Vec<bool> = sections
            .iter()
            .map(|s| is_short_line_list(&s.body))
            .collect();
        let has_lists = is_list.contains(&true);
        // Reserve the longest header this call can produce: counts only shrink from `total`,
        // and the shown size is longest either at `full` or as "1023 bytes".
        let worst_header = [full, full.min(1023)]
            .iter()
            .flat_map(|shown| {
                let kind = HeaderKind::of(ranked, focus_shown.as_deref());
                let text_first = (!ranked && has_lists)
                    .then(|| header(HeaderKind::TextFirst, total, total, true, *shown, full).len());
                [header(kind, total, total, true, *shown, full).len()]
                    .into_iter()
                    .chain(text_first)
            })
            .max()
            .unwrap_or(0);
        let room = budget.saturating_sub(worst_header + 2);

        let order: Vec<usize> = if ranked {
            let mut order: Vec<usize> = (0..total).filter(|i| scores[*i] > 0).collect();
            order.sort_by(|a, b| scores[*b].cmp(&scores[*a]).then(a.cmp(b)));
            order
        } else {
            // Without a focus the page's order holds, except that lists of short lines (link
            // lists, menus, tag clouds) give way to prose: the story is never cut short to
            // keep a "related" list above it.
            let (prose, lists): (Vec<usize>, Vec<usize>) = (0..total).partition(|i| !is_list[*i]);
            prose.into_iter().chain(lists).collect()
        };

        let mut kept: Vec<usize> = Vec::new();
        let mut used = 0usize;
        for i in order {
            let need = sections[i].emitted_len() + if kept.is_empty() { 0 } else { 2 };
            if used + need <= room {
                kept.push(i);
                used += need;
            } else if !ranked {
                // Top-down keeps a contiguous head of the page.
                break;
            }
        }
        kept.sort_unstable();
        let lists_left_out = !ranked
            && kept
                .last()
                .is_some_and(|last| (0..*last).any(|i| !kept.contains(&i)));

        let mut pieces: Vec<String> = Vec::new();
        let mut cut = false;
        if kept.is_empty() {
            // Not even the best section fits: show its beginning.
            let first = if ranked {
                (0..total).max_by(|a, b| scores[*a].cmp(&scores[*b]).then(b.cmp(a)))
            } else {
                (0..total).find(|i| !is_list[*i]).or((0..total).next())
            };
            if let Some(i) = first {
                let body = with_heading(&sections[i], true);
                let head = cut_at_line(&body, room);
                if !head.trim().is_empty() {
                    pieces.push(head.to_string());
                    kept.push(i);
                    cut = true;
                }
            }
        } else {
            let mut previous: Option<usize> = None;
            for &i in &kept {
                let after_previous = previous.is_some_and(|p| p + 1 == i);
                pieces.push(with_heading(&sections[i], !after_previous));
                previous = Some(i);
            }
        }

        let body = join(pieces.into_iter());
        let kind = match HeaderKind::of(ranked, focus_shown.as_deref()) {
            HeaderKind::Top if lists_left_out => HeaderKind::TextFirst,
            kind => kind,
        };
        let line = header(kind, kept.len(), total, cut, body.len(), full);
        let text = if body.is_empty() {
            line
        } else {
            format!("{line}\n\n{body}")
        };
        Filtered {
            text: cut_at_char_boundary(&text, budget).to_string(),
            note: None,
        }
    }
}

/// The section's text, with its heading repeated when it is a continuation shown on its own.
fn with_heading(section: &Section, standalone: bool) -> String {
    match section.continued_heading() {
        Some(h) if standalone => format!("{h}\n{}", section.body),
        _ => section.body.clone(),
    }
}

enum HeaderKind<'a> {
    Top,
    /// No focus, and lists of links were left out so that later prose fits.
    TextFirst,
    Ranked(&'a str),
    NoMatch(&'a str),
}

impl<'a> HeaderKind<'a> {
    fn of(ranked: bool, focus: Option<&'a str>) -> Self {
        match (ranked, focus) {
            (true, Some(f)) => HeaderKind::Ranked(f),
            (false, Some(f)) if !f.is_empty() => HeaderKind::NoMatch(f),
            _ => HeaderKind::Top,
        }
    }
}

/// The first line of a filtered text, written for the model that reads it.
fn header(
    kind: HeaderKind,
    kept: usize,
    total: usize,
    cut: bool,
    shown: usize,
    full: usize,
) -> String {
    let cut = if cut { ", the last one cut short" } else { "" };
    let size = format!("{} of {}", size(shown), size(full));
    match kind {
        HeaderKind::Top => format!(
            "[filtered: kept the first {kept} of {total} sections{cut} ({size}); call again with a focus to get the sections about a topic]"
        ),
        HeaderKind::TextFirst => format!(
            "[filtered: kept {kept} of {total} sections in page order, the text before lists of links{cut} ({size}); call again with a focus to get the sections about a topic]"
        ),
        HeaderKind::Ranked(focus) => format!(
            "[filtered: kept {kept} of {total} sections most relevant to \"{focus}\"{cut} ({size}); call again with a different focus or fetch a narrower url for the rest]"
        ),
        HeaderKind::NoMatch(focus) => format!(
            "[filtered: no section mentions \"{focus}\"; kept the first {kept} of {total} sections{cut} ({size}); call again with a different focus or fetch a narrower url]"
        ),
    }
}

fn size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} KB", bytes as f64 / 1024.0)
    }
}

fn shorten(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

fn join(pieces: impl Iterator<Item = String>) -> String {
    pieces.collect::<Vec<_>>().join("\n\n")
}

fn join_len(lens: impl Iterator<Item = usize>) -> usize {
    let mut total = 0;
    for (i, len) in lens.enumerate() {
        total += len + if i == 0 { 0 } else { 2 };
    }
    total
}

/// The longest prefix within `max` bytes, ending at a line break when one is in the second
/// half (a whole line reads better than half a word), else at a char boundary.
fn cut_at_line(text: &str, max: usize) -> &str {
    let head = cut_at_char_boundary(text, max);
    if head.len() == text.len() {
        return head;
    }
    match head.rfind('\n') {
        Some(pos) if pos >= head.len() / 2 => head[..pos].trim_end(),
        _ => head,
    }
}

fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

fn is_heading(line: &str) -> bool {
    let hashes = line.bytes().take_while(|b| *b == b'#').count();
    (1..=6).contains(&hashes) && line[hashes..].starts_with(' ')
}

/// A line's visible text: Markdown links reduced to their text, list markers and emphasis
/// dropped, whitespace collapsed.
fn visible(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line.trim();
    for marker in ["- ", "* ", "+ "] {
        if let Some(r) = rest.strip_prefix(marker) {
            rest = r;
        }
    }
    let mut skip_until = 0usize;
    for (i, c) in rest.char_indices() {
        if i < skip_until {
            continue;
        }
        match c {
            // `](url)` → drop the url part.
            ']' if rest[i..].starts_with("](") => {
                skip_until = rest[i..].find(')').map_or(rest.len(), |e| i + e + 1);
            }
            '[' | ']' | '*' | '_' | '`' | '!' => {}
            _ => out.push(c),
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

const SHARE_WORDS: [&str; 21] = [
    "share",
    "this",
    "on",
    "tweet",
    "twitter",
    "facebook",
    "linkedin",
    "email",
    "e",
    "mail",
    "print",
    "pinterest",
    "reddit",
    "whatsapp",
    "telegram",
    "x",
    "copy",
    "link",
    "pocket",
    "via",
    "article",
];
const SHARE_TRIGGERS: [&str; 8] = [
    "share",
    "tweet",
    "facebook",
    "twitter",
    "linkedin",
    "pinterest",
    "reddit",
    "whatsapp",
];
/// Whole lines that are page furniture, compared lowercase after [`visible`].
const FURNITURE: [&str; 22] = [
    "back to top",
    "top",
    "edit this page",
    "edit on github",
    "edit this page on github",
    "print this page",
    "advertisement",
    "sponsored",
    "subscribe",
    "sign in",
    "log in",
    "sign up",
    "menu",
    "close",
    "toggle navigation",
    "toggle menu",
    "skip to content",
    "skip to main content",
    "skip to navigation",
    "skip navigation",
    "jump to navigation",
    "jump to search",
];

/// Does this line (outside code) look like a cookie banner, skip link, share bar, copyright
/// line or other page furniture?
fn is_boilerplate(line: &str) -> bool {
    let seen = visible(line);
    let lower = seen.to_lowercase();
    if lower.is_empty() {
        return false;
    }
    if FURNITURE.contains(&lower.as_str()) || lower.starts_with("skip to ") {
        return true;
    }
    if lower.contains("cookie")
        && [
            "accept",
            "consent",
            "we use",
            "this site uses",
            "this website uses",
            "privacy",
        ]
        .iter()
        .any(|w| lower.contains(w))
        && lower.len() < 400
    {
        return true;
    }
    if lower.len() <= 200
        && (lower.starts_with('©')
            || lower.starts_with("copyright")
            || lower.starts_with("(c) ")
            || lower.contains("all rights reserved"))
    {
        return true;
    }
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    lower.len() <= 80
        && !words.is_empty()
        && words.iter().all(|w| SHARE_WORDS.contains(w))
        && words.iter().any(|w| SHARE_TRIGGERS.contains(w))
}

/// A block of at least three lines that are mostly short list items or links: a menu, a
/// "related" list, a tag cloud — what gives way first when a page is over the budget.
fn is_short_line_list(body: &str) -> bool {
    let lines: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !is_heading(l))
        .collect();
    let short_items = lines
        .iter()
        .filter(|l| {
            let marker = ["- ", "* ", "+ "].iter().any(|m| l.starts_with(m))
                || l.split_once(". ")
                    .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            (marker && visible(l).chars().count() <= 100) || is_nav_like(l)
        })
        .count();
    lines.len() >= 3 && short_items * 10 >= lines.len() * 7
}

/// A short line made of links (a menu entry); repeated ones are navigation.
fn is_nav_like(line: &str) -> bool {
    line.contains("](") && !is_heading(line) && visible(line).len() <= 60
}

/// The text without boilerplate lines (code blocks untouched), blank-line runs collapsed.
fn strip_boilerplate(text: &str) -> String {
    let mut in_code = false;
    let mut nav_counts: HashMap<&str, usize> = HashMap::new();
    for line in text.lines() {
        if is_fence(line) {
            in_code = !in_code;
        } else if !in_code && is_nav_like(line) {
            *nav_counts.entry(line.trim()).or_default() += 1;
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    let mut blank = false;
    for line in text.lines() {
        let fence = is_fence(line);
        let keep = in_code
            || fence
            || !(is_boilerplate(line) || nav_counts.get(line.trim()).is_some_and(|n| *n > 1));
        if fence {
            in_code = !in_code;
        }
        if !keep {
            continue;
        }
        let line = line.trim_end();
        if line.is_empty() && !in_code {
            blank = !out.is_empty();
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
            if blank {
                out.push('\n');
            }
        }
        blank = false;
        out.push_str(line);
    }
    out
}

/// Sections by heading, each split at blank lines (outside code) into parts of at most
/// [`MAX_SECTION_BYTES`] where it is larger.
fn split_sections(text: &str) -> Vec<Section> {
    // Blocks: runs of lines between blank lines, code fences kept whole.
    let mut blocks: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut in_code = false;
    for line in text.lines() {
        if is_fence(line) {
            in_code = !in_code;
        }
        let starts_heading = !in_code && is_heading(line);
        if (!in_code && line.trim().is_empty()) || (starts_heading && !current.is_empty()) {
            if !current.is_empty() {
                blocks.push(std::mem::take(&mut current));
            }
            if line.trim().is_empty() {
                continue;
            }
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        blocks.push(current);
    }

    let mut sections: Vec<Section> = Vec::new();
    let mut heading: Option<String> = None;
    for block in blocks {
        let first_line = block.lines().next().unwrap_or("");
        let opens_section = is_heading(first_line);
        if opens_section {
            heading = Some(first_line.to_string());
        }
        let joins_previous = !opens_section
            && sections.last().is_some_and(|s: &Section| {
                s.heading == heading && s.body.len() + 2 + block.len() <= MAX_SECTION_BYTES
            });
        match sections.last_mut() {
            Some(last) if joins_previous => {
                last.body.push_str("\n\n");
                last.body.push_str(&block);
            }
            _ => {
                let continuation = !opens_section
                    && heading.is_some()
                    && sections.last().is_some_and(|s| s.heading == heading);
                sections.push(Section {
                    heading: heading.clone(),
                    body: block,
                    continuation,
                });
            }
        }
    }
    sections
}

const STOPWORDS: [&str; 40] = [
    "a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "is", "are", "was", "be", "how",
    "what", "why", "when", "where", "which", "with", "by", "at", "from", "as", "it", "this",
    "that", "do", "does", "i", "me", "my", "you", "can", "about", "into", "vs", "use", "using",
];

/// Lowercase words with their common English suffixes removed, so "threads" meets "thread".
fn stem(word: &str) -> String {
    let mut w = word.to_lowercase();
    // Twice, so "moorings" → "mooring" → "moor" meets "mooring" → "moor".
    for _ in 0..2 {
        let stripped = [("ing", 6), ("ed", 5), ("es", 5), ("s", 4)]
            .iter()
            .find(|(suffix, min_len)| {
                w.len() >= *min_len && w.ends_with(suffix) && !w.ends_with("ss")
            })
            .map(|(suffix, _)| w.len() - suffix.len());
        match stripped {
            Some(len) => w.truncate(len),
            None => break,
        }
    }
    w
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// The focus as distinct stemmed words, stopwords dropped, in first-seen order.
fn focus_terms(focus: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    words(focus)
        .filter(|w| !STOPWORDS.contains(&w.to_lowercase().as_str()))
        .map(stem)
        .filter(|w| seen.insert(w.clone()))
        .collect()
}

/// Matched distinct terms dominate; then terms in the heading; then how often they occur.
fn score(section: &Section, terms: &[String]) -> u64 {
    if terms.is_empty() {
        return 0;
    }
    let mut counts: HashMap<String, u64> = HashMap::new();
    for w in words(&section.body) {
        *counts.entry(stem(w)).or_default() += 1;
    }
    let heading_words: HashSet<String> = section
        .heading
        .as_deref()
        .map(|h| words(h).map(stem).collect())
        .unwrap_or_default();
    let mut matched = 0u64;
    let mut in_heading = 0u64;
    let mut occurrences = 0u64;
    for term in terms {
        let n = counts.get(term).copied().unwrap_or(0);
        let h = heading_words.contains(term);
        if n > 0 || h {
            matched += 1;
        }
        if h {
            in_heading += 1;
        }
        occurrences += n;
    }
    matched * 10_000 + in_heading * 1_000 + occurrences.min(999)
}

/// What a model-backed filter (dispatch-model's `ModelResultFilter`) is told to do.
pub const MODEL_INSTRUCTION: &str = "You filter a fetched web page for another AI model. Return only \
the parts of the page that matter for the focus, copied verbatim as Markdown and in their original \
order; drop navigation, ads, cookie notices and other boilerplate. Without a focus, keep the main \
content. Stay within the byte budget. If nothing on the page is relevant, answer with one line \
saying so. No preamble, no commentary.";

/// Texts larger than this are narrowed by the built-in filter before they go to a model.
pub const MODEL_INPUT_MAX: usize = 100_000;

/// The request a model-backed filter sends: the page (narrowed by the built-in filter first
/// when it is larger than [`MODEL_INPUT_MAX`]) with the focus and the budget.
pub fn model_request(text: &str, focus: Option<&str>, budget: usize) -> String {
    let narrowed;
    let text = if text.len() > MODEL_INPUT_MAX {
        narrowed = DeterministicFilter.apply(text, focus, MODEL_INPUT_MAX).text;
        narrowed.as_str()
    } else {
        text
    };
    let focus_line = match focus.map(str::trim).filter(|f| !f.is_empty()) {
        Some(f) => format!("Focus: {f}"),
        None => "Focus: none (keep the main content)".to_string(),
    };
    format!("{focus_line}\nBudget: {budget} bytes\n\n<page>\n{text}\n</page>")
}

/// What a model-backed filter returns: the model's answer cut to the budget, or, when the
/// model could not be asked (`reason`), the built-in filter's result with a note saying why.
pub fn model_outcome(
    answer: Result<String, String>,
    text: &str,
    focus: Option<&str>,
    budget: usize,
) -> Filtered {
    match answer {
        Ok(answer) => Filtered {
            text: cut_at_char_boundary(&answer, budget).to_string(),
            note: None,
        },
        Err(reason) => Filtered {
            note: Some(format!(
                "model filter unavailable ({reason}); showing the built-in filter's result"
            )),
            ..DeterministicFilter.apply(text, focus, budget)
        },
    }
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
