//! Arguments a model escaped twice (spec §1.3, the seed's `tools.Execute`): a top-level string
//! value that holds `\n` as two characters where a line break was meant is unescaped once,
//! before any check reads the call. The rule is narrow on purpose, because an argument that
//! was right must never change: a regex, a printf format, a Windows path or JSON text in a
//! string keeps its backslashes.
//!
//! A string is unescaped only when all of these hold:
//! 1. it has no real line break or tab (real ones mean the escaping was already undone);
//! 2. it is not a Windows path and holds none (`C:\…`, `\\server\…`);
//! 3. it has a space or a `\t` (prose or code, not an identifier, a path or a pattern);
//! 4. it has a `\n` outside quotes (`"…"`, `'…'`, `` `…` ``): inside quotes, `\n` is what code
//!    and shell commands write on purpose (`printf("%d\n")`, `echo 'a\nb'`);
//! 5. it reads as the body of a JSON string, so every backslash starts a valid JSON escape
//!    (`\d+\n` does not: `\d` is no JSON escape, so it is a regex and stays).
//!
//! Only the values of the top-level object are looked at, whatever their names: the engine
//! never reads a tool's argument names. The one correct argument the rule still changes is an
//! unquoted `\n` in a one-line text with a space (a shell string `echo -e a\nb`); quoted, it
//! stays.

use serde_json::Value;

/// Unescape, in place, each top-level string value of `args` that the rule above says was
/// escaped twice; whether any changed.
pub(crate) fn unescape_args(args: &mut Value) -> bool {
    let Value::Object(map) = args else {
        return false;
    };
    let mut changed = false;
    for value in map.values_mut() {
        if let Value::String(text) = value
            && let Some(once) = unescape_once(text)
        {
            *text = once;
            changed = true;
        }
    }
    changed
}

/// `text` unescaped once, when the rule says it was escaped twice; `None` leaves it as it is.
pub(crate) fn unescape_once(text: &str) -> Option<String> {
    // Pass 1 looks at every string argument of every call: most hold no `\n` escape at all,
    // and one substring search settles them before the character scan below.
    if !text.contains("\\n") {
        return None;
    }
    if text.contains(['\n', '\r', '\t']) || holds_windows_path(text) {
        return None;
    }
    let scan = scan(text);
    if !scan.blank || !scan.newline_outside_quotes {
        return None;
    }
    // Every backslash must start a valid JSON escape, and no `"` may stand unescaped.
    serde_json::from_str::<String>(&format!("\"{text}\"")).ok()
}

/// What [`scan`] saw in a string's escapes.
struct Scan {
    /// A space, or a `\t` escape.
    blank: bool,
    /// A `\n` escape outside quotes.
    newline_outside_quotes: bool,
}

/// One pass over the escapes of `text`, tracking quotes: `\"` and `"` for double quotes (in a
/// twice-escaped text they appear as `\"`), `'` unless it is an apostrophe between two letters
/// (`it's`), and backticks.
fn scan(text: &str) -> Scan {
    let chars: Vec<char> = text.chars().collect();
    let mut seen = Scan {
        blank: false,
        newline_outside_quotes: false,
    };
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                match chars.get(i + 1) {
                    Some('n') if quote.is_none() => seen.newline_outside_quotes = true,
                    Some('t') => seen.blank = true,
                    Some('"') => toggle(&mut quote, '"'),
                    _ => {}
                }
                // The escape is two characters (a `\u` escape's digits are plain characters).
                i += 2;
                continue;
            }
            ' ' => seen.blank = true,
            '"' | '`' => toggle(&mut quote, chars[i]),
            '\'' => {
                let letter = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric());
                let apostrophe = i > 0 && letter(chars.get(i - 1)) && letter(chars.get(i + 1));
                if !apostrophe {
                    toggle(&mut quote, '\'');
                }
            }
            _ => {}
        }
        i += 1;
    }
    seen
}

/// A quote opens when none is open and closes the one it opened; other quotes inside it are
/// text.
fn toggle(quote: &mut Option<char>, q: char) {
    match *quote {
        None => *quote = Some(q),
        Some(open) if open == q => *quote = None,
        Some(_) => {}
    }
}

/// A drive path (`C:\`, `d:\`) or a network path (`\\server\share`) anywhere in `text`.
fn holds_windows_path(text: &str) -> bool {
    let bytes = text.as_bytes();
    let starts_word = |i: usize| i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
    let drive = bytes.windows(3).enumerate().any(|(i, w)| {
        w[0].is_ascii_alphabetic() && w[1] == b':' && w[2] == b'\\' && starts_word(i)
    });
    let unc = bytes.windows(3).enumerate().any(|(i, w)| {
        w[0] == b'\\'
            && w[1] == b'\\'
            && w[2].is_ascii_alphanumeric()
            && (i == 0 || matches!(bytes[i - 1], b' ' | b'"' | b'\'' | b'=' | b'(' | b','))
    });
    drive || unc
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    /// (what the model sent as the value, what the tool gets).
    const TABLE: &[(&str, &str)] = &[
        // Twice-escaped code and prose: unescaped once.
        (r"def f():\n    return 1\n", "def f():\n    return 1\n"),
        (r"line one\nline two", "line one\nline two"),
        (r"It's done\nNext step", "It's done\nNext step"),
        (r"col a\tcol b\nval 1\tval 2", "col a\tcol b\nval 1\tval 2"),
        (r#"x = \"a\"\ny = 2"#, "x = \"a\"\ny = 2"),
        (r#"{\"a\": 1,\n \"b\": 2}"#, "{\"a\": 1,\n \"b\": 2}"),
        (r"say hi\u0021\nbye now", "say hi!\nbye now"),
        (r"path: C-3PO\nnext line", "path: C-3PO\nnext line"),
        // A regex: `\d` is no JSON escape.
        (r"\d+\n", r"\d+\n"),
        (r"match \d+\n then stop", r"match \d+\n then stop"),
        (r"^\s*$\n and more", r"^\s*$\n and more"),
        // JSON text in a string, correct as sent (bare quotes) or with `\n` only inside quotes.
        (r#"{"text": "a\nb"}"#, r#"{"text": "a\nb"}"#),
        (r#"{\"text\": \"a\nb\"}"#, r#"{\"text\": \"a\nb\"}"#),
        // printf formats and quoted shell strings keep their escapes.
        (r#"printf("%d\n", x);"#, r#"printf("%d\n", x);"#),
        (r#"printf(\"%d\n\", x);"#, r#"printf(\"%d\n\", x);"#),
        (r"print('a\nb')", r"print('a\nb')"),
        (r"echo 'one\ntwo' | wc -l", r"echo 'one\ntwo' | wc -l"),
        (r"Use `\n` to break lines", r"Use `\n` to break lines"),
        // Windows paths.
        (r"C:\new folder\table.txt", r"C:\new folder\table.txt"),
        (
            r"copy C:\temp\new.txt D:\backup",
            r"copy C:\temp\new.txt D:\backup",
        ),
        (r"\\server\share\new docs", r"\\server\share\new docs"),
        (r"open \\nas\tmp\notes now", r"open \\nas\tmp\notes now"),
        // Identifiers and paths: no space.
        (r"path\nwithout_space", r"path\nwithout_space"),
        (r"src/main.rs", r"src/main.rs"),
        // Real line breaks: already right, even with a `\n` beside them.
        ("first\nsecond \\n third", "first\nsecond \\n third"),
        ("a\tb \\n c", "a\tb \\n c"),
        // An escaped backslash before `n` is not a line break.
        (r"say x\\n is escaped", r"say x\\n is escaped"),
        (r"tab\there only", r"tab\there only"),
        (r"ends with a lone \ ", r"ends with a lone \ "),
        ("", ""),
    ];

    #[test]
    fn a_string_is_unescaped_only_where_that_cannot_change_a_correct_argument() {
        for (sent, expected) in TABLE {
            let got = unescape_once(sent).unwrap_or_else(|| sent.to_string());
            assert_eq!(got, *expected, "sent: {sent:?}");
        }
    }

    #[test]
    fn unescaping_twice_escaped_text_is_idempotent() {
        for (sent, _) in TABLE {
            if let Some(once) = unescape_once(sent) {
                assert_eq!(unescape_once(&once), None, "{sent:?} unescaped twice");
            }
        }
    }

    #[test]
    fn only_top_level_strings_of_an_object_change() {
        let mut args = json!({
            "path": "notes.md",
            "content": r"# Title\n\nSome text\n",
            "count": 3,
            "nested": {"text": r"one line\ntwo"},
            "list": [r"one line\ntwo"],
        });
        assert!(unescape_args(&mut args));
        assert_eq!(
            args,
            json!({
                "path": "notes.md",
                "content": "# Title\n\nSome text\n",
                "count": 3,
                "nested": {"text": r"one line\ntwo"},
                "list": [r"one line\ntwo"],
            })
        );
        let mut plain = json!({"content": "already\nright"});
        assert!(!unescape_args(&mut plain));
        let mut not_object = json!(r"one line\ntwo");
        assert!(!unescape_args(&mut not_object));
        assert_eq!(not_object, json!(r"one line\ntwo"));
    }
}
