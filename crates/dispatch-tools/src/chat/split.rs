//! Splitting a long message into parts the platform accepts (Telegram 4,096 characters,
//! Discord 2,000): at the last paragraph break that fits, else the last line break, else the
//! last space, and never inside an HTML tag or entity. A cut outside any open element or code
//! fence is preferred; when a part must end inside one, it is closed at the end of that part
//! and opened again at the start of the next, so every part renders on its own.

/// How a message is marked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Markup {
    /// Telegram's HTML subset: tags must be balanced within each message.
    Html,
    /// Discord's Markdown: a code fence must be closed within each message.
    Markdown,
}

/// `text` in parts of at most `limit` characters (Unicode scalar values), in order.
pub fn split(text: &str, limit: usize, markup: Markup) -> Vec<String> {
    let limit = limit.max(16);
    let mut parts = Vec::new();
    let mut rest: String = text.to_string();
    while rest.chars().count() > limit {
        let chars: Vec<char> = rest.chars().collect();
        let scan = scan(&chars, markup);
        let (cut, part, reopen) = cut_part(&chars, &scan, limit, markup);
        if !part.trim().is_empty() {
            parts.push(part);
        }
        let tail: String = chars[cut..].iter().collect();
        rest = format!("{reopen}{}", tail.trim_start_matches(['\n', '\r']));
    }
    if !rest.trim().is_empty() || parts.is_empty() {
        parts.push(rest);
    }
    parts
}

/// What is known at each boundary `i` (before `chars[i]`; `0..=len`).
struct Scan {
    /// Not inside a tag or an entity.
    safe: Vec<bool>,
    /// Open elements (HTML) or `1` inside a code fence (Markdown).
    depth: Vec<usize>,
}

fn scan(chars: &[char], markup: Markup) -> Scan {
    let mut safe = Vec::with_capacity(chars.len() + 1);
    let mut depth = Vec::with_capacity(chars.len() + 1);
    match markup {
        Markup::Html => {
            let mut stack: Vec<String> = Vec::new();
            let mut tag: Option<String> = None;
            let mut in_entity = false;
            for &c in chars {
                safe.push(tag.is_none() && !in_entity);
                depth.push(stack.len());
                if let Some(text) = &mut tag {
                    text.push(c);
                    if c == '>' {
                        let text = std::mem::take(text);
                        tag = None;
                        apply_tag(&text, &mut stack);
                    }
                } else if in_entity {
                    if !(c.is_ascii_alphanumeric() || c == '#') {
                        in_entity = false;
                    }
                } else if c == '<' {
                    tag = Some("<".to_string());
                } else if c == '&' {
                    in_entity = true;
                }
            }
            safe.push(tag.is_none() && !in_entity);
            depth.push(stack.len());
        }
        Markup::Markdown => {
            let mut in_fence = false;
            let mut line_start = true;
            for (i, &c) in chars.iter().enumerate() {
                safe.push(true);
                depth.push(usize::from(in_fence));
                if line_start && c == '`' && chars[i..].starts_with(&['`', '`', '`']) {
                    in_fence = !in_fence;
                }
                line_start = c == '\n';
            }
            safe.push(true);
            depth.push(usize::from(in_fence));
        }
    }
    Scan { safe, depth }
}

/// Open or close an element for a complete tag `<…>`.
fn apply_tag(tag: &str, stack: &mut Vec<String>) {
    let inner = tag.trim_start_matches('<').trim_end_matches('>').trim();
    if let Some(closing) = inner.strip_prefix('/') {
        let name = tag_name(closing);
        if let Some(at) = stack.iter().rposition(|open| tag_name(&open[1..]) == name) {
            stack.truncate(at);
        }
    } else if !inner.ends_with('/')
        && !inner.is_empty()
        && !tag_name(inner).eq_ignore_ascii_case("br")
    {
        stack.push(tag.to_string());
    }
}

fn tag_name(inner: &str) -> String {
    inner
        .trim()
        .split(|c: char| c.is_whitespace() || c == '>' || c == '/')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// Where to cut `chars`: the boundary, the part (closed where needed) and what the next part
/// must start with to reopen what was open.
fn cut_part(chars: &[char], scan: &Scan, limit: usize, markup: Markup) -> (usize, String, String) {
    let mut reserve = 0;
    loop {
        let window = limit.saturating_sub(reserve).max(1).min(chars.len());
        let cut = best_cut(chars, scan, window);
        let (close, reopen) = match markup {
            Markup::Html => html_wrap(chars, cut),
            Markup::Markdown if scan.depth[cut] > 0 => markdown_wrap(chars, cut),
            Markup::Markdown => (String::new(), String::new()),
        };
        // A reopening that eats most of the next part would never finish: cut plainly then.
        let (close, reopen) = if reopen.chars().count() > limit / 4 {
            (String::new(), String::new())
        } else {
            (close, reopen)
        };
        let body: String = chars[..cut].iter().collect();
        let body = body.trim_end().to_string();
        let part = format!("{body}{close}");
        let over = part.chars().count().saturating_sub(limit);
        if over == 0 || window == 1 {
            return (cut, part, reopen);
        }
        reserve += over;
    }
}

/// The best boundary in `1..=window`: the latest paragraph break, line break or space outside
/// any element, in that order of preference; then the same inside one; then any boundary
/// outside any element, then any outside a tag or entity; then `window` itself.
fn best_cut(chars: &[char], scan: &Scan, window: usize) -> usize {
    let kind = |i: usize| -> u8 {
        let before = chars[i - 1];
        if before == '\n' && i >= 2 && chars[i - 2] == '\n' {
            3
        } else if before == '\n' {
            2
        } else if before.is_whitespace() {
            1
        } else {
            0
        }
    };
    // A cut far before the limit wastes a message: natural breaks count from a quarter on.
    let least = (window / 4).max(1);
    for outside in [true, false] {
        for wanted in [3u8, 2, 1] {
            if let Some(i) = (least..=window)
                .rev()
                .find(|&i| scan.safe[i] && (!outside || scan.depth[i] == 0) && kind(i) == wanted)
            {
                return i;
            }
        }
    }
    (least..=window)
        .rev()
        .find(|&i| scan.safe[i] && scan.depth[i] == 0)
        .or_else(|| (1..=window).rev().find(|&i| scan.safe[i]))
        .unwrap_or(window)
}

/// The closing tags for what is open at `cut`, innermost first, and the opening tags to repeat.
fn html_wrap(chars: &[char], cut: usize) -> (String, String) {
    let mut stack = Vec::new();
    let mut tag: Option<String> = None;
    for &c in &chars[..cut] {
        if let Some(text) = &mut tag {
            text.push(c);
            if c == '>' {
                let text = std::mem::take(text);
                tag = None;
                apply_tag(&text, &mut stack);
            }
        } else if c == '<' {
            tag = Some("<".to_string());
        }
    }
    let close = stack
        .iter()
        .rev()
        .map(|open| format!("</{}>", tag_name(&open[1..])))
        .collect();
    (close, stack.concat())
}

/// The closing fence, and the fence line (with its language) to open the next part with.
fn markdown_wrap(chars: &[char], cut: usize) -> (String, String) {
    let text: String = chars[..cut].iter().collect();
    let opener = text
        .lines()
        .rfind(|l| l.starts_with("```"))
        .unwrap_or("```")
        .trim_end()
        .to_string();
    ("\n```".to_string(), format!("{opener}\n"))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn lens(parts: &[String]) -> Vec<usize> {
        parts.iter().map(|p| p.chars().count()).collect()
    }

    #[test]
    fn a_message_within_the_limit_is_one_part() {
        assert_eq!(split("hello", 4096, Markup::Html), vec!["hello"]);
        assert_eq!(split("", 2000, Markup::Markdown), vec![""]);
    }

    #[test]
    fn paragraphs_are_kept_whole_and_nothing_is_lost() {
        let paragraph = "word ".repeat(19) + "end.";
        let text = vec![paragraph.clone(); 50].join("\n\n");
        assert_eq!(text.chars().count(), 50 * 99 + 49 * 2);
        let parts = split(&text, 4096, Markup::Html);
        assert_eq!(parts.len(), 2);
        assert!(
            lens(&parts).iter().all(|&n| n <= 4096),
            "{:?}",
            lens(&parts)
        );
        assert_eq!(parts.join("\n\n"), text);
        assert!(
            parts
                .iter()
                .all(|p| p.ends_with("end.") && p.starts_with("word"))
        );
    }

    #[test]
    fn without_paragraphs_lines_then_words_are_the_boundaries() {
        let text = vec!["a line of text"; 400].join("\n");
        let parts = split(&text, 2000, Markup::Markdown);
        assert!(
            parts
                .iter()
                .all(|p| p.ends_with("text") && p.starts_with("a line"))
        );
        assert_eq!(parts.join("\n"), text);
        let words = "wordy ".repeat(1000);
        let parts = split(words.trim(), 2000, Markup::Markdown);
        assert!(lens(&parts).iter().all(|&n| n <= 2000));
        assert!(
            parts
                .iter()
                .all(|p| p.ends_with("wordy") && p.starts_with("wordy"))
        );
    }

    #[test]
    fn a_cut_never_falls_inside_a_tag_or_an_entity() {
        // No spaces at all: the only cuts are between characters, some inside tags/entities.
        let unit = "<b>x</b>&amp;<a href=\"https://example.com/a\">y</a>";
        let text = unit.repeat(300);
        for part in split(&text, 100, Markup::Html) {
            assert!(part.chars().count() <= 100);
            assert_eq!(
                part.matches('<').count(),
                part.matches('>').count(),
                "{part}"
            );
            assert!(!part.ends_with('&') && !part.ends_with("&amp"), "{part}");
            assert_eq!(
                part.matches("<b>").count(),
                part.matches("</b>").count(),
                "{part}"
            );
        }
    }

    #[test]
    fn a_part_that_ends_inside_an_element_closes_it_and_the_next_reopens_it() {
        let text = format!("<b>{}</b>", "bold words ".repeat(30).trim_end());
        let parts = split(&text, 120, Markup::Html);
        assert!(parts.len() > 2);
        for part in &parts {
            assert!(part.starts_with("<b>") && part.ends_with("</b>"), "{part}");
            assert!(part.chars().count() <= 120);
        }
    }

    #[test]
    fn a_break_before_an_element_wins_over_one_inside_it() {
        let text = format!(
            "{}\n\n<pre>{}</pre>",
            "intro ".repeat(10).trim_end(),
            "code line\n".repeat(20)
        );
        let parts = split(&text, 200, Markup::Html);
        assert_eq!(parts[0], "intro ".repeat(10).trim_end());
        assert!(parts[1].starts_with("<pre>"));
    }

    #[test]
    fn a_code_fence_cut_in_two_is_closed_and_reopened_with_its_language() {
        let code = "let x = 1;\n".repeat(60);
        let text = format!("```rust\n{code}```");
        let parts = split(&text, 300, Markup::Markdown);
        assert!(parts.len() > 2);
        for part in &parts {
            assert!(part.starts_with("```rust\n"), "{part}");
            assert!(part.ends_with("```"), "{part}");
            assert!(part.chars().count() <= 300);
        }
    }

    #[test]
    fn characters_not_bytes_are_counted() {
        let text = "é".repeat(5000);
        let parts = split(&text, 4096, Markup::Html);
        assert_eq!(lens(&parts), vec![4096, 904]);
    }
}
