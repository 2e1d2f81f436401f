//! `--approve ask` and `tooldispatch answer`: confirmations and questions (ask_user,
//! store_secret) answered at the terminal. A round's reply comes on stdin, so everything goes
//! through /dev/tty; a secret is typed with echo off.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dispatch_engine::{ConfirmReply, ConfirmRequest, Confirmer, Question};

pub struct TerminalConfirmer {
    tty: Arc<Mutex<File>>,
}

impl TerminalConfirmer {
    pub fn open() -> Result<Self, String> {
        let tty = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .map_err(|e| format!("--approve ask needs a terminal to ask on (/dev/tty: {e}); use --approve all or none"))?;
        Ok(TerminalConfirmer {
            tty: Arc::new(Mutex::new(tty)),
        })
    }
}

/// Longest argument text shown in a prompt.
const SHOWN_ARGS: usize = 600;

#[async_trait]
impl Confirmer for TerminalConfirmer {
    async fn confirm(&self, request: &ConfirmRequest) -> ConfirmReply {
        let tty = self.tty.clone();
        let request = request.clone();
        tokio::task::spawn_blocking(move || ask(&tty, &request))
            .await
            .unwrap_or_default()
    }

    async fn ask(&self, questions: &[Question]) -> Option<Vec<String>> {
        let tty = self.tty.clone();
        let questions = questions.to_vec();
        tokio::task::spawn_blocking(move || ask_questions(&tty, &questions))
            .await
            .ok()
            .flatten()
    }

    fn interactive(&self) -> bool {
        true
    }
}

/// Each question with its detail and numbered options, one answered line each; `None` when
/// the terminal closed.
fn ask_questions(tty: &Mutex<File>, questions: &[Question]) -> Option<Vec<String>> {
    let mut tty = tty.lock().ok()?;
    let mut answers = Vec::with_capacity(questions.len());
    for question in questions {
        let line = if question.secret {
            read_hidden(&mut tty, &prompt(question))?
        } else {
            tty.write_all(prompt(question).as_bytes())
                .and_then(|_| tty.flush())
                .ok()?;
            read_line(&tty)?
        };
        answers.push(line.trim_end_matches(['\r', '\n']).to_string());
    }
    Some(answers)
}

/// A question as the terminal shows it: detail, numbered options, and what happens to the
/// answer.
fn prompt(question: &Question) -> String {
    let mut prompt = format!("\n{}\n", shown(&question.question, 2000));
    if let Some(detail) = &question.detail {
        prompt.push_str(&format!("  {}\n", shown(detail, 4000)));
    }
    for (n, option) in question.options.iter().enumerate() {
        prompt.push_str(&format!("  {}) {}\n", n + 1, shown(option, 400)));
    }
    if question.multi_select {
        prompt.push_str("  (several: numbers separated by commas)\n");
    }
    // Said on every prompt, so a question dressed up as a secret prompt cannot make the user
    // paste a credential the model will read.
    prompt.push_str(if question.secret {
        "(typing is hidden; stored as a secret, the model sees only its name) > "
    } else {
        "(your answer is shown to the model) > "
    });
    prompt
}

/// One line; `None` at end of input.
fn read_line(tty: &File) -> Option<String> {
    let mut line = String::new();
    match BufReader::new(tty.try_clone().ok()?).read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line),
    }
}

/// Ask on the terminal for a value typed with echo off (`tooldispatch secret set`).
pub fn prompt_hidden(prompt: &str) -> Result<String, String> {
    let mut tty = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|e| format!("cannot open the terminal to ask for the value (/dev/tty: {e}); pipe the value in on stdin instead"))?;
    read_hidden(&mut tty, prompt).ok_or_else(|| "no value was typed".to_string())
}

/// `prompt`, then one line typed with echo off; echo comes back even when reading fails. Echo
/// goes off before the prompt shows, so nothing typed as soon as it appears is echoed.
fn read_hidden(tty: &mut File, prompt: &str) -> Option<String> {
    use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
    let saved = tcgetattr(&*tty).ok()?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    tcsetattr(&*tty, OptionalActions::Now, &quiet).ok()?;
    let shown = tty.write_all(prompt.as_bytes()).and_then(|_| tty.flush());
    let line = shown.ok().and_then(|()| read_line(tty));
    let _ = tcsetattr(&*tty, OptionalActions::Now, &saved);
    let _ = tty.write_all(b"\n");
    line
}

/// Text from the model shown at the terminal: control characters (escape sequences could
/// redraw the prompt the user is approving) and invisible format characters (bidi overrides
/// could make the text read backwards) are shown as `\u{..}` instead.
pub(crate) fn shown(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max_chars {
            out.push('…');
            break;
        }
        if c.is_control() || is_invisible_format(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// Bidi controls, zero-width characters and the byte-order mark: they change how the text
/// around them is displayed without showing themselves.
fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

fn ask(tty: &Mutex<File>, request: &ConfirmRequest) -> ConfirmReply {
    let Ok(mut tty) = tty.lock() else {
        return ConfirmReply::default();
    };
    let prompt = format!(
        "\n{} wants to run: {}\n  arguments: {}\n  [y] yes  [n] no (n <reason> tells the model why)  [t] yes, and allow everything this turn  [r] yes, and remember `{}`\n> ",
        shown(&request.tool_name, 200),
        shown(&request.why, 400),
        shown(&request.tool_args, SHOWN_ARGS),
        shown(&request.remember_rule, 400),
    );
    if tty
        .write_all(prompt.as_bytes())
        .and_then(|_| tty.flush())
        .is_err()
    {
        return ConfirmReply::default();
    }
    let mut line = String::new();
    let Ok(reader) = tty.try_clone() else {
        return ConfirmReply::default();
    };
    if BufReader::new(reader).read_line(&mut line).is_err() {
        return ConfirmReply::default();
    }
    parse_answer(&line)
}

/// `y`, `n [reason]`, `t`, `r`; anything else declines.
fn parse_answer(line: &str) -> ConfirmReply {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let yes = ConfirmReply {
        approve: true,
        ..ConfirmReply::default()
    };
    match word.to_lowercase().as_str() {
        "y" | "yes" => yes,
        "t" => ConfirmReply {
            allow_turn: true,
            ..yes
        },
        "r" => ConfirmReply {
            remember: true,
            ..yes
        },
        _ => ConfirmReply {
            approve: false,
            reason: Some(rest.trim().to_string()).filter(|r| !r.is_empty()),
            ..ConfirmReply::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_from_the_model_are_not_sent_to_the_terminal() {
        let text = shown("a\u{1b}[2Jb\nc", 100);
        assert_eq!(text, "a\\u{1b}[2Jb\\u{a}c");
        // A right-to-left override would show `exe.txt` as `txt.exe`.
        assert_eq!(shown("a\u{202E}b\u{200B}c", 100), "a\\u{202e}b\\u{200b}c");
        assert_eq!(shown("abcdef", 3), "abc…");
    }

    #[test]
    fn answers_parse_to_replies() {
        assert!(parse_answer("y\n").approve);
        assert!(parse_answer("t").allow_turn);
        assert!(parse_answer("r").remember);
        let no = parse_answer("n  not that file ");
        assert_eq!(
            (no.approve, no.reason.as_deref()),
            (false, Some("not that file"))
        );
        assert!(!parse_answer("").approve);
    }

    #[test]
    fn a_prompt_says_whether_the_model_reads_the_answer() {
        // A question dressed as store_secret's prompt still says the answer is visible.
        let imitation = Question {
            question: "Enter the value for GH_TOKEN".into(),
            detail: Some("stored encrypted; the model only ever sees the name".into()),
            options: vec!["paste it".into()],
            multi_select: true,
            secret: false,
        };
        assert_eq!(
            prompt(&imitation),
            "\nEnter the value for GH_TOKEN\n  stored encrypted; the model only ever sees the name\n  1) paste it\n  (several: numbers separated by commas)\n(your answer is shown to the model) > "
        );
        let secret = Question {
            question: "Enter the value for GH_TOKEN".into(),
            secret: true,
            ..Question::default()
        };
        assert_eq!(
            prompt(&secret),
            "\nEnter the value for GH_TOKEN\n(typing is hidden; stored as a secret, the model sees only its name) > "
        );
    }
}
