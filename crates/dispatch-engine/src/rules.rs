//! Allow / ask / deny rules from `<workdir>/.tooldispatch/rules`: parsing, lints, globs and "remember".

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::subject::Subject;

/// What a matching rule does to a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// Run without asking.
    Allow,
    /// Always ask, even when an allow rule matches.
    Ask,
    /// Refuse without asking.
    Deny,
}

impl RuleKind {
    fn verb(self) -> &'static str {
        match self {
            RuleKind::Allow => "allow",
            RuleKind::Ask => "ask",
            RuleKind::Deny => "deny",
        }
    }

    fn from_verb(word: &str) -> Option<RuleKind> {
        [RuleKind::Allow, RuleKind::Ask, RuleKind::Deny]
            .into_iter()
            .find(|kind| word.eq_ignore_ascii_case(kind.verb()))
    }
}

/// One parsed line of the rules file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// What the rule does.
    pub kind: RuleKind,
    /// Glob over tool names.
    pub tool: String,
    /// Glob over the call's canonical args; `None` matches any args.
    pub pattern: Option<String>,
    /// Environment variable names (globs) an allow rule lets a call set or pass:
    /// `allow run_command(npm test) env(NODE_ENV CI_*)`.
    pub env: Vec<String>,
    /// 1-based line in the file, 0 when the rule was added in memory.
    pub line: usize,
    /// The line as written, trimmed.
    pub text: String,
}

/// A problem in the rules file, worded for the person fixing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleLint {
    /// 1-based line the problem is on.
    pub line: usize,
    /// The offending line as written, trimmed.
    pub rule: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// The rules of one work directory, with the lints found when they were parsed.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    rules: Vec<Rule>,
    parse_lints: Vec<RuleLint>,
    lints: Vec<RuleLint>,
    source: Option<PathBuf>,
    /// The rules file exists but the work directory is not trusted, so it was not read.
    ignored: bool,
}

impl Rules {
    /// Where the rules live, relative to the work directory.
    pub const FILE: &'static str = ".tooldispatch/rules";

    /// Parses rules text; bad lines become lints and are skipped.
    pub fn parse(text: &str) -> Rules {
        let mut rules = Vec::new();
        let mut parse_lints = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let text = raw.trim_start_matches('\u{feff}').trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            // Lossy decoding in `load` leaves U+FFFD where the bytes were bad; the rule that
            // results is not the one the user wrote, so say so instead of guessing.
            if text.contains('\u{fffd}') {
                parse_lints.push(RuleLint {
                    line,
                    rule: text.to_string(),
                    message: format!(
                        "line {line}: contains bytes that are not UTF-8 (shown as \u{fffd}); \
                         save the file as UTF-8"
                    ),
                });
            }
            match parse_line(line, text) {
                Ok(rule) => rules.push(rule),
                Err(problem) => parse_lints.push(RuleLint {
                    line,
                    rule: text.to_string(),
                    message: format!("line {line}: {problem}"),
                }),
            }
        }
        let mut parsed = Rules {
            rules,
            parse_lints,
            lints: Vec::new(),
            source: None,
            ignored: false,
        };
        parsed.relint();
        parsed
    }

    /// Reads `<workdir>/.tooldispatch/rules`; a missing file gives no rules but keeps the path.
    pub fn load(workdir: &Path) -> io::Result<Rules> {
        let path = workdir.join(Self::FILE);
        let mut rules = match std::fs::read(&path) {
            Ok(bytes) => Rules::parse(&String::from_utf8_lossy(&bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Rules::default(),
            Err(error) => return Err(error),
        };
        rules.source = Some(path);
        Ok(rules)
    }

    /// No rules for a work directory the user has not trusted: its rules file, if any, is not
    /// read (a cloned repository must not grant itself permissions). "Remember" still writes
    /// there, and takes effect for this engine at once.
    pub fn untrusted(workdir: &Path) -> Rules {
        let path = workdir.join(Self::FILE);
        Rules {
            ignored: std::fs::symlink_metadata(&path).is_ok(),
            source: Some(path),
            ..Rules::default()
        }
    }

    /// One line for the model and the user when an untrusted work directory's rules file was
    /// ignored, else `None`.
    pub fn ignored_note(&self) -> Option<String> {
        self.ignored.then(|| {
            "Note: .tooldispatch/rules in this work directory is ignored until the user trusts the directory (`tooldispatch trust`).".to_string()
        })
    }

    /// The rules in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Parse problems and shadowed rules, in line order.
    pub fn lints(&self) -> &[RuleLint] {
        &self.lints
    }

    /// Rules whose tool glob matches none of `names`.
    pub fn lint_against_names(&self, names: &[&str]) -> Vec<RuleLint> {
        self.rules
            .iter()
            .filter(|rule| !names.iter().any(|name| glob_match(&rule.tool, name)))
            .map(unknown_tool_lint)
            .collect()
    }

    /// The first rule of `kind` whose tool glob matches `tool` and whose pattern matches the
    /// call: deny and ask rules fire when the pattern matches anything the call touches; an
    /// allow rule only when it covers everything (the command line, or every path and URL)
    /// and names every environment variable the call sets.
    pub fn find(&self, kind: RuleKind, tool: &str, call: &RuleCall) -> Option<&Rule> {
        self.rules.iter().find(|rule| {
            rule.kind == kind
                && glob_match(&rule.tool, tool)
                && match rule.pattern.as_deref() {
                    None => true,
                    Some(pattern) if kind == RuleKind::Allow => {
                        call.primary.iter().all(|text| glob_match(pattern, text))
                    }
                    Some(pattern) => call
                        .primary
                        .iter()
                        .chain(&call.secondary)
                        .any(|text| glob_match(pattern, text)),
                }
                && (kind != RuleKind::Allow
                    || call
                        .env
                        .iter()
                        .all(|name| rule.env.iter().any(|glob| glob_match(glob, name))))
        })
    }

    /// Appends `allow <rule_text>` to the file and to `self`; `Ok(false)` if it was already there.
    pub fn remember(&mut self, rule_text: &str) -> io::Result<bool> {
        let rule_text = rule_text.trim();
        if rule_text.contains(['\n', '\r']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot remember {rule_text:?}: a rule must fit on one line"),
            ));
        }
        let line_text = format!("allow {rule_text}");
        let mut rule = parse_line(0, &line_text).map_err(|problem| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot remember `{line_text}`: {problem}"),
            )
        })?;
        let Some(path) = self.source.clone() else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "cannot remember `{line_text}`: these rules were not loaded from a work \
                     directory, so there is no rules file to write; use Rules::load"
                ),
            ));
        };
        if self
            .rules
            .iter()
            .any(|existing| same_allow(existing, &rule))
        {
            return Ok(false);
        }
        let existing = match std::fs::read(&path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error),
        };
        // Another process may have written the rule since this file was loaded.
        if let Some(found) = Rules::parse(&existing)
            .rules
            .into_iter()
            .find(|existing| same_allow(existing, &rule))
        {
            self.rules.push(found);
            self.relint();
            return Ok(false);
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        refuse_symlinks(&path)?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let separator = if existing.is_empty() || existing.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        file.write_all(format!("{separator}{line_text}\n").as_bytes())?;
        rule.line = existing.lines().count() + 1;
        self.rules.push(rule);
        self.relint();
        Ok(true)
    }

    /// The file these rules were loaded from (or would be, when it did not exist).
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    fn relint(&mut self) {
        let mut lints = self.parse_lints.clone();
        lints.extend(shadow_lints(&self.rules));
        lints.sort_by_key(|lint| lint.line);
        self.lints = lints;
    }
}

fn same_allow(a: &Rule, b: &Rule) -> bool {
    a.kind == RuleKind::Allow
        && b.kind == a.kind
        && a.tool == b.tool
        && a.pattern == b.pattern
        && a.env == b.env
}

/// Splits a trimmed, non-comment line into a rule, or says what is wrong with it.
fn parse_line(line: usize, full: &str) -> Result<Rule, String> {
    let (text, env) = split_env(full)?;
    let head = text.find('(').map_or(text, |open| &text[..open]).trim_end();
    let (kind, body) = match head.find(char::is_whitespace) {
        Some(space) => {
            let verb = &text[..space];
            let kind = RuleKind::from_verb(verb)
                .ok_or_else(|| format!("unknown verb \"{verb}\"; use allow, ask or deny"))?;
            (kind, text[space..].trim_start())
        }
        // A lone verb (`deny`, `deny(x)`) is a rule with its tool missing, not a tool named `deny`.
        None => match RuleKind::from_verb(head) {
            Some(kind) => (kind, text[head.len()..].trim_start()),
            // No verb: the seed's allow_list syntax.
            None => (RuleKind::Allow, text),
        },
    };
    let (tool, pattern) = match body.split_once('(') {
        None => (body, None),
        Some((tool, rest)) => {
            let Some((pattern, after)) = rest.rsplit_once(')') else {
                return Err(
                    "missing closing \")\"; end the rule with \")\", or drop the \"(\" so the \
                     rule matches any arguments"
                        .to_string(),
                );
            };
            if !after.is_empty() {
                return Err(format!(
                    "unexpected text \"{after}\" after the closing \")\"; the pattern must end \
                     the line, so move that text inside the parentheses or onto its own line"
                ));
            }
            (tool.trim_end(), Some(pattern))
        }
    };
    if tool.is_empty() {
        return Err(format!(
            "empty tool name; write `{} TOOL` or `{} TOOL(PATTERN)`, e.g. `{} run_command(git status **)`",
            kind.verb(),
            kind.verb(),
            kind.verb()
        ));
    }
    if tool.contains(char::is_whitespace) {
        return Err(format!(
            "tool name \"{tool}\" contains a space; a rule names one tool (or one glob such as \
             mcp__github__*), so split it into one rule per line"
        ));
    }
    if tool.contains(')') {
        return Err(format!(
            "tool name \"{tool}\" contains \")\" without a matching \"(\"; write TOOL(PATTERN)"
        ));
    }
    if !env.is_empty() && kind != RuleKind::Allow {
        return Err(format!(
            "env(...) belongs to allow rules only (it names the variables a call may set); drop it from this {} rule",
            kind.verb()
        ));
    }
    Ok(Rule {
        kind,
        tool: tool.to_string(),
        pattern: pattern.map(str::to_string),
        env,
        line,
        text: full.to_string(),
    })
}

/// `TOOL(PATTERN) env(A B_*)` → (`TOOL(PATTERN)`, [A, B_*]).
fn split_env(text: &str) -> Result<(&str, Vec<String>), String> {
    let Some(start) = text.rfind(" env(") else {
        return Ok((text, Vec::new()));
    };
    let inner = &text[start + " env(".len()..];
    let Some(inner) = inner.strip_suffix(')').filter(|i| !i.contains(['(', ')'])) else {
        return Ok((text, Vec::new()));
    };
    let names: Vec<String> = inner
        .split([' ', ',', '\t'])
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    if names.is_empty() {
        return Err("env() names no variable; list them, e.g. env(NODE_ENV CI)".to_string());
    }
    Ok((text[..start].trim_end(), names))
}

fn place(line: usize) -> String {
    if line == 0 {
        "a rule added this session".to_string()
    } else {
        format!("line {line}")
    }
}

fn unknown_tool_lint(rule: &Rule) -> RuleLint {
    let message = match literal_text(&rule.tool) {
        Some(name) => format!(
            "{}: no known tool is named \"{name}\", so this rule never fires; fix the name \
             (find_tools lists them) or delete the rule",
            place(rule.line)
        ),
        None => format!(
            "{}: the tool glob \"{}\" matches no known tool, so this rule never fires; fix the \
             glob or delete the rule",
            place(rule.line),
            rule.tool
        ),
    };
    RuleLint {
        line: rule.line,
        rule: rule.text.clone(),
        message,
    }
}

/// Does `by` catch every call `rule` catches? Only the cheap, certain cases are recognised.
fn covers(by: &Rule, rule: &Rule) -> bool {
    // The shadowed rule's tool glob is matched as literal text: `*` covers `mcp__*`.
    let tool_covered = by.tool == rule.tool || glob_match(&by.tool, &rule.tool);
    let args_covered = match by.pattern.as_deref() {
        None | Some("**") => true,
        Some(pattern) => rule.pattern.as_deref() == Some(pattern),
    };
    tool_covered && args_covered
}

fn shadow_lints(rules: &[Rule]) -> Vec<RuleLint> {
    // Checked order is deny, then ask, then allow, whatever the line order.
    let stronger = |kind: RuleKind| match kind {
        RuleKind::Allow => &[RuleKind::Deny, RuleKind::Ask][..],
        RuleKind::Ask => &[RuleKind::Deny][..],
        RuleKind::Deny => &[][..],
    };
    rules
        .iter()
        .filter_map(|rule| {
            let by = stronger(rule.kind).iter().find_map(|&kind| {
                rules
                    .iter()
                    .find(|other| other.kind == kind && covers(other, rule))
            })?;
            Some(RuleLint {
                line: rule.line,
                rule: rule.text.clone(),
                message: format!(
                    "{} rule on {} never fires: {} rule on {} (`{}`) is checked first and \
                     covers it; delete one of them or narrow the {} rule",
                    rule.kind.verb(),
                    place(rule.line),
                    by.kind.verb(),
                    place(by.line),
                    by.text,
                    by.kind.verb()
                ),
            })
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Literal(char),
    /// `?`: one character other than `/`.
    One,
    /// `*`: any run without `/`.
    Star,
    /// `**`: any run at all.
    DoubleStar,
}

fn tokenize(pattern: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        let token = match c {
            '\\' => match chars.peek() {
                Some(&escaped @ ('*' | '?' | '\\')) => {
                    chars.next();
                    Token::Literal(escaped)
                }
                _ => Token::Literal('\\'),
            },
            '*' if chars.peek() == Some(&'*') => {
                while chars.next_if_eq(&'*').is_some() {}
                Token::DoubleStar
            }
            '*' => Token::Star,
            '?' => Token::One,
            other => Token::Literal(other),
        };
        tokens.push(token);
    }
    tokens
}

/// The text a glob matches when it has no wildcard, `None` otherwise.
fn literal_text(pattern: &str) -> Option<String> {
    tokenize(pattern)
        .into_iter()
        .map(|token| match token {
            Token::Literal(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// Anchored glob match: `*` stops at `/`, `**` does not, `?` is one non-`/` char, `\` escapes.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    // Dynamic programming over (pattern token, text position), one row at a time: time is
    // tokens × chars whatever the pattern, so `*a*a*a*b` cannot blow up.
    let text: Vec<char> = text.chars().collect();
    let mut row = vec![false; text.len() + 1];
    let mut next = vec![false; text.len() + 1];
    if let Some(first) = row.first_mut() {
        *first = true;
    }
    for token in tokenize(pattern) {
        next.fill(false);
        match token {
            Token::Literal(_) | Token::One => {
                for (at, &c) in text.iter().enumerate() {
                    let fits = match token {
                        Token::Literal(wanted) => c == wanted,
                        _ => c != '/',
                    };
                    next[at + 1] = row[at] && fits;
                }
            }
            Token::Star | Token::DoubleStar => {
                next[0] = row[0];
                for (at, &c) in text.iter().enumerate() {
                    let extends = token == Token::DoubleStar || c != '/';
                    next[at + 1] = row[at + 1] || (next[at] && extends);
                }
            }
        }
        std::mem::swap(&mut row, &mut next);
        if !row.contains(&true) {
            return false;
        }
    }
    row.last().copied().unwrap_or(false)
}

/// Escapes `*`, `?` and `\` so the glob matches `text` literally.
pub fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// A call as rules see it: the texts a pattern is matched against, from the call's
/// [`Subject`] (never from argument names).
#[derive(Clone, Debug, Default)]
pub struct RuleCall {
    /// What an allow rule must cover: the command line, or every path and URL, or the raw
    /// arguments when the tool declares none of those.
    pub primary: Vec<String>,
    /// Further texts a deny or ask rule may match (the paths a command names).
    pub secondary: Vec<String>,
    /// Environment variables the call sets or passes.
    pub env: Vec<String>,
}

impl RuleCall {
    /// A call whose only text is `text` (a command line, a path or raw arguments).
    pub fn text(text: &str) -> RuleCall {
        RuleCall {
            primary: vec![text.to_string()],
            ..RuleCall::default()
        }
    }

    /// `args` are the parsed arguments (`Null` when they did not parse; then `raw` is used).
    pub fn new(subject: &Subject, workdir: &Path, args: &Value, raw: &str) -> RuleCall {
        let paths = subject.paths.iter().map(|p| shown_path(p, workdir));
        let (primary, secondary) = if !subject.argv.is_empty() {
            (
                vec![subject.argv.join(" ")],
                paths.chain(subject.urls.iter().cloned()).collect(),
            )
        } else if !subject.paths.is_empty() || !subject.urls.is_empty() {
            (
                subject.urls.iter().cloned().chain(paths).collect(),
                Vec::new(),
            )
        } else {
            (vec![args_text(args, raw)], Vec::new())
        };
        RuleCall {
            primary,
            secondary,
            env: subject.env.clone(),
        }
    }
}

/// A path as rules write it: relative to the work directory inside it, absolute outside.
pub fn shown_path(path: &Path, workdir: &Path) -> String {
    match path.strip_prefix(workdir) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

/// The generalised rule written when the user approves with "remember": the command's
/// program and subcommand, the directory of a path, the origin of a URL, and the environment
/// variables the call set.
pub fn remembered_rule(
    tool: &str,
    subject: &Subject,
    workdir: &Path,
    args: &Value,
    raw: &str,
) -> String {
    let raw = args_text(args, raw);
    let raw = raw.as_str();
    let tool = literal_glob(tool);
    let pattern = if !subject.argv.is_empty() {
        let words: Vec<&str> = subject.argv.iter().map(String::as_str).collect();
        Some(argv_pattern(&words))
    } else if let Some(url) = subject
        .urls
        .first()
        .filter(|_| subject.urls.len() == 1 && subject.paths.is_empty())
    {
        Some(url_pattern(url))
    } else if let Some(path) = subject
        .paths
        .first()
        .filter(|_| subject.paths.len() == 1 && subject.urls.is_empty())
    {
        Some(path_pattern(&shown_path(path, workdir)))
    } else if args_are_empty(raw) {
        None
    } else {
        Some(literal_glob(raw))
    };
    let mut rule = match pattern {
        Some(pattern) => format!("{tool}({pattern})"),
        None => tool,
    };
    if !subject.env.is_empty() {
        rule.push_str(&format!(" env({})", subject.env.join(" ")));
    }
    rule
}

/// "Remember" writes only a real file in a real `.tooldispatch/` directory: a symlink there
/// (planted by a cloned repository or by a tool) would send the write outside the work directory.
fn refuse_symlinks(path: &Path) -> io::Result<()> {
    for candidate in [Some(path), path.parent()].into_iter().flatten() {
        match std::fs::symlink_metadata(candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} is a symbolic link; the rules file must be a plain file in the work directory",
                        candidate.display()
                    ),
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An escaped glob that also stays on one line: a newline becomes `?`, which still matches it.
fn literal_glob(text: &str) -> String {
    escape_glob(text).replace(['\n', '\r'], "?")
}

/// The arguments as rules see them when the tool declares nothing: the parsed value written
/// out (keys sorted, escapes decoded), never the raw text, which an escape such as `\u0073`
/// could make differ from what the tool reads.
fn args_text(args: &Value, raw: &str) -> String {
    if args.is_null() {
        raw.to_string()
    } else {
        args.to_string()
    }
}

fn args_are_empty(raw: &str) -> bool {
    let raw = raw.trim();
    raw.is_empty()
        || match serde_json::from_str::<Value>(raw) {
            Ok(Value::Null) => true,
            Ok(Value::Object(fields)) => fields.is_empty(),
            _ => false,
        }
}

/// `git status -s` → `git status **`; `git status` → `git status`.
///
/// One glob cannot match both "exactly the prefix" and "the prefix, a space, more": `prefix **`
/// needs the space and `prefix**` also matches `git statusx` or `rmdir` after approving `rm`,
/// another program or subcommand the user never saw. So a call longer than its prefix gives
/// `prefix **` (the call and every longer call with that prefix), and a call that *is* the
/// prefix gives the exact prefix; approving a longer call later adds the `**` form.
fn argv_pattern(words: &[&str]) -> String {
    let prefix_len = match words.get(1) {
        Some(second) if !second.starts_with('-') => 2,
        _ => 1,
    };
    let prefix = words
        .iter()
        .take(prefix_len)
        .map(|word| literal_glob(word))
        .collect::<Vec<_>>()
        .join(" ");
    if words.len() > prefix_len {
        format!("{prefix} **")
    } else {
        prefix
    }
}

/// `src/main.rs` → `src/*` (same directory, no subdirectories); `x.txt` → `*` (the top of the
/// work directory, since the path has no directory part).
fn path_pattern(path: &str) -> String {
    // `*` stops only at `/`, so with `\` separators a directory glob would reach into every
    // subdirectory (and `..\`); such paths are remembered exactly.
    if path.contains('\\') {
        return literal_glob(path);
    }
    match path.rfind('/') {
        Some(slash) => format!("{}*", literal_glob(&path[..=slash])),
        None => "*".to_string(),
    }
}

/// `https://host:8080/a?b` → `https://host:8080/**`.
fn url_pattern(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return literal_glob(url);
    };
    // URL parsers also end the authority at `\`, so it is a boundary here too.
    let end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(end);
    let plain_scheme = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    // Generalising is only safe when the host is certain: no path means `host**` would also
    // match `host.evil.example`; an empty host (`file:///`) would cover every file; userinfo
    // (`user@host`) cannot be globbed without letting `evil#@host` through. These are remembered
    // exactly, userinfo included, as the seed did.
    if !plain_scheme || authority.is_empty() || authority.contains('@') || !after.starts_with('/') {
        return literal_glob(url);
    }
    format!("{}://{}/**", literal_glob(scheme), literal_glob(authority))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use std::time::{Duration, Instant};

    fn rule(kind: RuleKind, tool: &str, pattern: Option<&str>, line: usize, text: &str) -> Rule {
        Rule {
            kind,
            tool: tool.to_string(),
            pattern: pattern.map(str::to_string),
            env: Vec::new(),
            line,
            text: text.to_string(),
        }
    }

    fn messages(lints: &[RuleLint]) -> Vec<&str> {
        lints.iter().map(|lint| lint.message.as_str()).collect()
    }

    /// Remembers the rule for a call and returns (rule, does it allow that call).
    /// The subject a tool that knows these arguments declares, in the work directory `/w`.
    fn subject_of(args: &Value) -> Subject {
        let workdir = Path::new("/w");
        let mut subject = Subject::default();
        if let Some(argv) = args.get("argv").and_then(Value::as_array) {
            subject.argv = argv
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
        }
        for key in ["path", "file", "target"] {
            if let Some(path) = args.get(key).and_then(Value::as_str) {
                subject = subject.path(crate::subject::resolve_path(workdir, path));
            }
        }
        if let Some(url) = args.get("url").and_then(Value::as_str) {
            subject = subject.url(url);
        }
        if let Some(Value::Object(env)) = args.get("env") {
            subject = subject.env(env.keys().cloned());
        }
        subject
    }

    fn remembered(tool: &str, args: Value) -> (String, bool) {
        let raw = args.to_string();
        let subject = subject_of(&args);
        let workdir = Path::new("/w");
        let text = remembered_rule(tool, &subject, workdir, &args, &raw);
        let rules = Rules::parse(&format!("allow {text}"));
        let allowed = rules
            .find(
                RuleKind::Allow,
                tool,
                &RuleCall::new(&subject, workdir, &args, &raw),
            )
            .is_some();
        (text, allowed)
    }

    #[test]
    fn glob_star_does_not_cross_slash() {
        assert_eq!(glob_match("src/*", "src/main.rs"), true);
        assert_eq!(glob_match("src/*", "src/a/main.rs"), false);
        assert_eq!(glob_match("*", ""), true);
        assert_eq!(glob_match("a*c", "a/c"), false);
    }

    #[test]
    fn double_star_crosses_slash() {
        assert_eq!(glob_match("src/**", "src/a/b/c.rs"), true);
        assert_eq!(glob_match("**.rs", "src/a/b/c.rs"), true);
        assert_eq!(glob_match("**", ""), true);
        assert_eq!(glob_match("a/**/z", "a/b/c/z"), true);
        assert_eq!(glob_match("a/**/z", "a/z"), false);
    }

    #[test]
    fn three_stars_act_as_double_star() {
        assert_eq!(glob_match("a***z", "a/b/z"), true);
    }

    #[test]
    fn question_mark_is_one_non_slash_char() {
        assert_eq!(glob_match("a?c", "abc"), true);
        assert_eq!(glob_match("a?c", "ac"), false);
        assert_eq!(glob_match("a?c", "a/c"), false);
        assert_eq!(glob_match("??", "é\u{1f600}"), true);
    }

    #[test]
    fn escaped_star_is_literal() {
        assert_eq!(glob_match(r"a\*b", "a*b"), true);
        assert_eq!(glob_match(r"a\*b", "axb"), false);
        assert_eq!(glob_match(r"\?", "?"), true);
        assert_eq!(glob_match(r"\?", "x"), false);
        assert_eq!(glob_match(r"a\\b", r"a\b"), true);
    }

    #[test]
    fn backslash_before_other_chars_is_literal() {
        assert_eq!(glob_match(r"C:\Users", r"C:\Users"), true);
        assert_eq!(glob_match(r"end\", r"end\"), true);
    }

    #[test]
    fn glob_is_anchored() {
        assert_eq!(glob_match("git", "git status"), false);
        assert_eq!(glob_match("status", "git status"), false);
        assert_eq!(glob_match("", ""), true);
        assert_eq!(glob_match("", "x"), false);
    }

    #[test]
    fn pathological_glob_is_fast() {
        let text = "a".repeat(20_000);
        let started = Instant::now();
        assert_eq!(glob_match("*a*a*a*a*a*a*a*a*b", &text), false);
        assert_eq!(glob_match("**a**a**a**a**a**a**b", &text), false);
        assert_eq!(glob_match("*a*a*a*a*a*a*a*a", &text), true);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn escape_glob_matches_the_text_literally() {
        for text in [r"a*b?c\d", "**", "", "x(y)z", "line\\"] {
            assert_eq!(glob_match(&escape_glob(text), text), true, "{text}");
        }
        assert_eq!(escape_glob(r"a*b?c\d"), r"a\*b\?c\\d");
        assert_eq!(glob_match(&escape_glob("a*"), "abc"), false);
    }

    #[test]
    fn parse_reads_kind_tool_pattern_line_and_text() {
        let rules = Rules::parse(
            "# comment\n\n  deny run_command(rm **)  \nask http_request\nallow read_files(src/*)\n",
        );
        assert_eq!(
            rules.rules(),
            &[
                rule(
                    RuleKind::Deny,
                    "run_command",
                    Some("rm **"),
                    3,
                    "deny run_command(rm **)"
                ),
                rule(RuleKind::Ask, "http_request", None, 4, "ask http_request"),
                rule(
                    RuleKind::Allow,
                    "read_files",
                    Some("src/*"),
                    5,
                    "allow read_files(src/*)"
                ),
            ]
        );
        assert_eq!(rules.lints(), &[]);
    }

    #[test]
    fn line_without_verb_is_allow() {
        let rules = Rules::parse("run_command(git status)\nfind_tools\nrun_command (ls **)");
        assert_eq!(
            rules.rules(),
            &[
                rule(
                    RuleKind::Allow,
                    "run_command",
                    Some("git status"),
                    1,
                    "run_command(git status)"
                ),
                rule(RuleKind::Allow, "find_tools", None, 2, "find_tools"),
                rule(
                    RuleKind::Allow,
                    "run_command",
                    Some("ls **"),
                    3,
                    "run_command (ls **)"
                ),
            ]
        );
    }

    #[test]
    fn pattern_runs_to_the_final_paren() {
        let rules = Rules::parse("deny run_command(echo (a) b)");
        assert_eq!(rules.rules()[0].pattern.as_deref(), Some("echo (a) b"));
        assert_eq!(rules.lints(), &[]);
    }

    #[test]
    fn bad_lines_are_linted_and_skipped() {
        let rules = Rules::parse(
            "permit run_command\n\
             allow run_command(git status\n\
             allow (x)\n\
             deny\n\
             allow run_command(ls) extra\n\
             allow run command\n\
             ask edit_file\n",
        );
        assert_eq!(
            rules.rules(),
            &[rule(RuleKind::Ask, "edit_file", None, 7, "ask edit_file")]
        );
        assert_eq!(
            rules.lints(),
            &[
                RuleLint {
                    line: 1,
                    rule: "permit run_command".to_string(),
                    message: "line 1: unknown verb \"permit\"; use allow, ask or deny".to_string(),
                },
                RuleLint {
                    line: 2,
                    rule: "allow run_command(git status".to_string(),
                    message: "line 2: missing closing \")\"; end the rule with \")\", or drop \
                              the \"(\" so the rule matches any arguments"
                        .to_string(),
                },
                RuleLint {
                    line: 3,
                    rule: "allow (x)".to_string(),
                    message: "line 3: empty tool name; write `allow TOOL` or `allow \
                              TOOL(PATTERN)`, e.g. `allow run_command(git status **)`"
                        .to_string(),
                },
                RuleLint {
                    line: 4,
                    rule: "deny".to_string(),
                    message: "line 4: empty tool name; write `deny TOOL` or `deny \
                              TOOL(PATTERN)`, e.g. `deny run_command(git status **)`"
                        .to_string(),
                },
                RuleLint {
                    line: 5,
                    rule: "allow run_command(ls) extra".to_string(),
                    message: "line 5: unexpected text \" extra\" after the closing \")\"; the \
                              pattern must end the line, so move that text inside the \
                              parentheses or onto its own line"
                        .to_string(),
                },
                RuleLint {
                    line: 6,
                    rule: "allow run command".to_string(),
                    message: "line 6: tool name \"run command\" contains a space; a rule names \
                              one tool (or one glob such as mcp__github__*), so split it into \
                              one rule per line"
                        .to_string(),
                },
            ]
        );
    }

    #[test]
    fn allow_shadowed_by_deny_is_linted() {
        let rules = Rules::parse(
            "allow run_command(git status)\ndeny run_command\nallow run_command(ls)\n",
        );
        assert_eq!(
            messages(rules.lints()),
            vec![
                "allow rule on line 1 never fires: deny rule on line 2 (`deny run_command`) is \
                 checked first and covers it; delete one of them or narrow the deny rule",
                "allow rule on line 3 never fires: deny rule on line 2 (`deny run_command`) is \
                 checked first and covers it; delete one of them or narrow the deny rule",
            ]
        );
        assert_eq!(rules.lints()[0].rule, "allow run_command(git status)");
    }

    #[test]
    fn allow_shadowed_by_ask_with_same_pattern_is_linted() {
        let rules = Rules::parse("ask edit_file(src/*)\nallow edit_file(src/*)\n");
        assert_eq!(
            messages(rules.lints()),
            vec![
                "allow rule on line 2 never fires: ask rule on line 1 (`ask edit_file(src/*)`) \
                 is checked first and covers it; delete one of them or narrow the ask rule"
            ]
        );
    }

    #[test]
    fn ask_shadowed_by_deny_glob_is_linted() {
        let rules = Rules::parse("ask mcp__github__create_issue\ndeny mcp__github__*(**)\n");
        assert_eq!(
            messages(rules.lints()),
            vec![
                "ask rule on line 1 never fires: deny rule on line 2 (`deny mcp__github__*(**)`) \
                 is checked first and covers it; delete one of them or narrow the deny rule"
            ]
        );
    }

    #[test]
    fn narrower_deny_does_not_shadow() {
        let rules = Rules::parse(
            "deny run_command(rm **)\nallow run_command(git **)\nallow run_command\ndeny edit_*\nallow read_files\n",
        );
        assert_eq!(rules.lints(), &[]);
    }

    #[test]
    fn find_returns_the_first_matching_rule_of_that_kind() {
        let rules = Rules::parse(
            "allow run_command(git log **)\n\
             deny run_command(rm **)\n\
             allow run_command(git **)\n\
             ask mcp__*\n\
             allow read_files\n",
        );
        let line = |kind, tool, subject| {
            rules
                .find(kind, tool, &RuleCall::text(subject))
                .map(|r| r.line)
        };
        assert_eq!(line(RuleKind::Allow, "run_command", "git log -p"), Some(1));
        assert_eq!(line(RuleKind::Allow, "run_command", "git diff"), Some(3));
        assert_eq!(line(RuleKind::Allow, "run_command", "rm -rf /"), None);
        assert_eq!(line(RuleKind::Deny, "run_command", "rm -rf /"), Some(2));
        assert_eq!(line(RuleKind::Deny, "run_command", "git diff"), None);
        assert_eq!(line(RuleKind::Ask, "mcp__github__x", "{}"), Some(4));
        assert_eq!(line(RuleKind::Ask, "run_command", "ls"), None);
    }

    #[test]
    fn rule_without_pattern_matches_any_args() {
        let rules = Rules::parse("allow read_files");
        for subject in ["", "src/a/b.rs", "{\"x\":1}"] {
            assert_eq!(
                rules
                    .find(RuleKind::Allow, "read_files", &RuleCall::text(subject))
                    .map(|r| r.line),
                Some(1)
            );
        }
        assert_eq!(
            rules.find(RuleKind::Allow, "read_file", &RuleCall::text("")),
            None
        );
    }

    #[test]
    fn lint_against_names_flags_dead_globs() {
        let rules = Rules::parse("allow web_*\nallow read_*\nallow edit_fil\n");
        assert_eq!(
            messages(&rules.lint_against_names(&["read_files", "edit_file"])),
            vec![
                "line 1: the tool glob \"web_*\" matches no known tool, so this rule never \
                 fires; fix the glob or delete the rule",
                "line 3: no known tool is named \"edit_fil\", so this rule never fires; fix the \
                 name (find_tools lists them) or delete the rule",
            ]
        );
    }

    #[test]
    fn deny_matches_anything_the_call_touches_and_allow_must_cover_everything() {
        let rules = Rules::parse(
            "deny run_command(**.env)\nallow edit_file(src/**)\nallow run_command(npm test) env(CI NODE_*)\n",
        );
        let workdir = Path::new("/w");
        let call = |subject: Subject| RuleCall::new(&subject, workdir, &Value::Null, "{}");
        // A command's file operands are matched by deny rules too.
        let cat_env = Subject::default().argv(["cat", "x"]).path("/w/config/.env");
        assert!(
            rules
                .find(RuleKind::Deny, "run_command", &call(cat_env))
                .is_some()
        );
        // An allow rule must cover every path: one outside the pattern keeps it asking.
        let inside = Subject::default().path("/w/src/a.rs");
        let both = Subject::default().path("/w/src/a.rs").path("/w/../etc/x");
        assert!(
            rules
                .find(RuleKind::Allow, "edit_file", &call(inside))
                .is_some()
        );
        assert!(
            rules
                .find(RuleKind::Allow, "edit_file", &call(both))
                .is_none()
        );
        // env(): every variable the call sets must be named.
        let ci = Subject::default()
            .argv(["npm", "test"])
            .env(["CI", "NODE_ENV"]);
        let preload = Subject::default().argv(["npm", "test"]).env(["LD_PRELOAD"]);
        assert!(
            rules
                .find(RuleKind::Allow, "run_command", &call(ci))
                .is_some()
        );
        assert!(
            rules
                .find(RuleKind::Allow, "run_command", &call(preload))
                .is_none()
        );
    }

    #[test]
    fn env_groups_parse_only_on_allow_rules() {
        let rules = Rules::parse(
            "allow run_command(npm test) env(CI, NODE_*)\ndeny x env(A)\nallow y env()\n",
        );
        assert_eq!(rules.rules().len(), 1);
        assert_eq!(rules.rules()[0].env, vec!["CI", "NODE_*"]);
        assert_eq!(rules.rules()[0].pattern.as_deref(), Some("npm test"));
        assert_eq!(rules.lints().len(), 2, "{:?}", rules.lints());
    }

    #[test]
    fn remembered_argv_rule_keeps_the_subcommand_prefix() {
        assert_eq!(
            remembered("run_command", json!({"argv": ["git", "status", "--short"]})),
            ("run_command(git status **)".to_string(), true)
        );
        assert_eq!(
            remembered("run_command", json!({"argv": ["ls", "-la", "src"]})),
            ("run_command(ls **)".to_string(), true)
        );
        assert_eq!(
            remembered("run_command", json!({"argv": ["git", "status"]})),
            ("run_command(git status)".to_string(), true)
        );
        assert_eq!(
            remembered("run_command", json!({"argv": ["pwd"]})),
            ("run_command(pwd)".to_string(), true)
        );
        assert_eq!(
            remembered(
                "run_command",
                json!({"argv": ["npm", "test"], "env": {"CI": "1"}})
            ),
            ("run_command(npm test) env(CI)".to_string(), true)
        );
        assert_eq!(
            remembered("run_command", json!({"argv": ["echo", "a*b", "x\ny"]})),
            (r"run_command(echo a\*b **)".to_string(), true)
        );
    }

    #[test]
    fn remembered_argv_rule_does_not_reach_other_programs() {
        let rules = Rules::parse("allow run_command(git status **)\nallow run_command(rm)");
        let allowed = |subject| {
            rules
                .find(RuleKind::Allow, "run_command", &RuleCall::text(subject))
                .is_some()
        };
        assert_eq!(allowed("git status -s"), true);
        assert_eq!(allowed("git statusx"), false);
        assert_eq!(allowed("git status"), false);
        assert_eq!(allowed("rmdir x"), false);
        assert_eq!(allowed("rm"), true);
    }

    #[test]
    fn remembered_path_rule_covers_the_same_directory_only() {
        assert_eq!(
            remembered("edit_file", json!({"path": "src/lib/a.rs"})),
            ("edit_file(src/lib/*)".to_string(), true)
        );
        assert_eq!(
            remembered("edit_file", json!({"file": "notes.txt"})),
            ("edit_file(*)".to_string(), true)
        );
        assert_eq!(
            remembered("edit_file", json!({"target": "/tmp/a*b/x"})),
            (r"edit_file(/tmp/a\*b/*)".to_string(), true)
        );
        assert_eq!(
            remembered("edit_file", json!({"path": r"src\lib\a.rs"})),
            (r"edit_file(src\\lib\\a.rs)".to_string(), true)
        );
        let rules = Rules::parse("allow edit_file(src/lib/*)");
        assert_eq!(
            rules.find(
                RuleKind::Allow,
                "edit_file",
                &RuleCall::text("src/lib/sub/b.rs")
            ),
            None
        );
    }

    #[test]
    fn remembered_url_rule_covers_the_same_origin_only() {
        assert_eq!(
            remembered(
                "http_request",
                json!({"url": "https://api.example.com:8443/v1/x?q=1"})
            ),
            (
                "http_request(https://api.example.com:8443/**)".to_string(),
                true
            )
        );
        assert_eq!(
            remembered("fetch_page", json!({"url": "https://example.com"})),
            ("fetch_page(https://example.com)".to_string(), true)
        );
        assert_eq!(
            remembered("fetch_page", json!({"url": "https://u@example.com/x"})),
            ("fetch_page(https://u@example.com/x)".to_string(), true)
        );
        assert_eq!(
            remembered("fetch_page", json!({"url": "file:///etc/hosts"})),
            ("fetch_page(file:///etc/hosts)".to_string(), true)
        );
        let rules = Rules::parse("allow fetch_page(https://example.com/**)");
        let allowed = |subject| {
            rules
                .find(RuleKind::Allow, "fetch_page", &RuleCall::text(subject))
                .is_some()
        };
        assert_eq!(allowed("https://example.com/a/b"), true);
        assert_eq!(allowed("https://example.com.evil.net/a"), false);
        assert_eq!(allowed("https://evil.net/https://example.com/"), false);
    }

    #[test]
    fn remembered_raw_rule_is_exact_or_bare_when_args_are_empty() {
        assert_eq!(
            remembered("web_search", json!({"query": "rust *globs*"})),
            (
                r#"web_search({"query":"rust \*globs\*"})"#.to_string(),
                true
            )
        );
        assert_eq!(
            remembered("shell", json!({"command": "ls | wc -l"})),
            (r#"shell({"command":"ls | wc -l"})"#.to_string(), true)
        );
        assert_eq!(
            remembered("list_sessions", json!({})),
            ("list_sessions".to_string(), true)
        );
        let nothing = Subject::default();
        assert_eq!(
            remembered_rule("now", &nothing, Path::new("/w"), &Value::Null, "  "),
            "now"
        );
        assert_eq!(
            remembered_rule("now", &nothing, Path::new("/w"), &Value::Null, "{ }"),
            "now"
        );
    }

    #[test]
    fn load_of_missing_file_is_empty_but_knows_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let rules = Rules::load(dir.path()).unwrap();
        assert_eq!(rules.rules(), &[]);
        assert_eq!(
            rules.source(),
            Some(dir.path().join(".tooldispatch/rules").as_path())
        );
    }

    #[test]
    fn load_reads_the_rules_file_and_survives_bad_bytes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".tooldispatch")).unwrap();
        std::fs::write(
            dir.path().join(Rules::FILE),
            b"deny run_command(rm **)\nallow read_files(\xff)\n",
        )
        .unwrap();
        let rules = Rules::load(dir.path()).unwrap();
        assert_eq!(rules.rules().len(), 2);
        assert_eq!(rules.rules()[0].text, "deny run_command(rm **)");
        assert_eq!(
            messages(rules.lints()),
            vec![
                "line 2: contains bytes that are not UTF-8 (shown as \u{fffd}); save the file as \
                 UTF-8"
            ]
        );
    }

    #[test]
    fn remember_appends_an_allow_line_and_creates_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut rules = Rules::load(dir.path()).unwrap();
        assert_eq!(rules.remember("run_command(git status **)").unwrap(), true);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(Rules::FILE)).unwrap(),
            "allow run_command(git status **)\n"
        );
        assert_eq!(
            rules.find(
                RuleKind::Allow,
                "run_command",
                &RuleCall::text("git status -s")
            ),
            Some(&rule(
                RuleKind::Allow,
                "run_command",
                Some("git status **"),
                1,
                "allow run_command(git status **)"
            ))
        );
    }

    #[test]
    fn remember_does_not_duplicate_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(Rules::FILE);
        std::fs::create_dir_all(dir.path().join(".tooldispatch")).unwrap();
        std::fs::write(&path, "read_files(src/*)\n# note").unwrap();
        let mut rules = Rules::load(dir.path()).unwrap();
        assert_eq!(rules.remember("read_files(src/*)").unwrap(), false);
        assert_eq!(rules.remember("edit_file(src/*)").unwrap(), true);
        assert_eq!(rules.remember("edit_file(src/*)").unwrap(), false);
        // Written by someone else after load: still not duplicated.
        let mut stale = Rules::load(dir.path()).unwrap();
        std::fs::write(
            &path,
            "read_files(src/*)\n# note\nallow edit_file(src/*)\nallow x\n",
        )
        .unwrap();
        assert_eq!(stale.remember("x").unwrap(), false);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "read_files(src/*)\n# note\nallow edit_file(src/*)\nallow x\n"
        );
        assert_eq!(
            rules.rules().last().map(|r| (r.line, r.text.as_str())),
            Some((3, "allow edit_file(src/*)"))
        );
    }

    #[test]
    fn remember_relints_a_rule_an_ask_rule_shadows() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".tooldispatch")).unwrap();
        std::fs::write(dir.path().join(Rules::FILE), "ask edit_file\n").unwrap();
        let mut rules = Rules::load(dir.path()).unwrap();
        assert_eq!(rules.lints(), &[]);
        assert_eq!(rules.remember("edit_file(src/*)").unwrap(), true);
        assert_eq!(
            messages(rules.lints()),
            vec![
                "allow rule on line 2 never fires: ask rule on line 1 (`ask edit_file`) is \
                 checked first and covers it; delete one of them or narrow the ask rule"
            ]
        );
    }

    #[test]
    fn remember_without_a_source_is_not_found() {
        let mut rules = Rules::parse("");
        let error = rules.remember("x").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            error.to_string(),
            "cannot remember `allow x`: these rules were not loaded from a work directory, so \
             there is no rules file to write; use Rules::load"
        );
    }

    #[test]
    fn remember_rejects_text_that_is_not_one_rule() {
        let dir = tempfile::tempdir().unwrap();
        let mut rules = Rules::load(dir.path()).unwrap();
        for text in ["x\ndeny y", "run_command(ls", ""] {
            assert_eq!(
                rules.remember(text).unwrap_err().kind(),
                io::ErrorKind::InvalidInput,
                "{text:?}"
            );
        }
        assert_eq!(dir.path().join(Rules::FILE).exists(), false);
    }
}
