//! The core of the `calculate` tool: one arithmetic expression in, the text the model sees out.
//!
//! exmex does the parsing and the arithmetic. In front of it sits a small lexer and checker:
//! exmex accepts things a model does not mean (free variables, `sqrt 4`, left-associative `^`,
//! `-2^2 = 4`) and reports mistakes in its own internal terms, so we reject those forms first
//! with a message that says how to write the expression instead.

use std::panic::catch_unwind;

use exmex::prelude::*;
use exmex::{BinOp, FloatOpsFactory, MakeOperators, MatchLiteral, Operator};

/// Longest expression accepted, in chars.
const MAX_CHARS: usize = 1000;
/// Significant digits of a non-integer result.
const SIG_DIGITS: usize = 12;
/// Integers below this magnitude print in full; from here on f64 stops being exact enough.
const INTEGER_LIMIT: f64 = 1e15;
/// Appended to parse errors so the model knows what the calculator does understand.
const SYNTAX_HINT: &str =
    "use numbers, + - * / % ^, parentheses and functions such as sqrt(x), ln(x), sin(x)";

/// Evaluate one arithmetic expression to the text the model sees.
pub fn evaluate(expr: &str) -> Result<String, String> {
    let chars = expr.chars().count();
    if chars > MAX_CHARS {
        return Err(format!(
            "expression too long ({chars} chars, max {MAX_CHARS})"
        ));
    }
    if expr.trim().is_empty() {
        return Err("empty expression; pass one arithmetic expression such as 2*(3+4)".to_string());
    }
    let tokens = lex(expr)?;
    let ops = CalcOps::make();
    check(&tokens, &ops)?;
    let text = rewrite_binary_calls(&tokens, &ops);
    // exmex indexes its internal vectors directly; a bug there must cost one result, not the
    // whole round, so a panic becomes an ordinary error.
    let value = catch_unwind(|| run_exmex(&text)).map_err(|_| {
        "the evaluator failed on this expression; rewrite it more simply".to_string()
    })??;
    format_number(value)
}

/// exmex's float operators with the precedence a model expects.
#[derive(Clone, Debug)]
struct CalcOps;

impl MakeOperators<f64> for CalcOps {
    fn make<'a>() -> Vec<Operator<'a, f64>> {
        // exmex ranks `/` above `*` and lets `*` jump ahead when both operands are numbers;
        // `%` must sit in the same class or `7 % 3 * 2` and `6 * 7 % 4` come out wrong. One
        // priority and no commutativity gives plain left-to-right order within the class.
        let multiplicative = |apply: fn(f64, f64) -> f64| BinOp {
            apply,
            prio: 2,
            is_commutative: false,
        };
        let mut ops: Vec<Operator<'a, f64>> = FloatOpsFactory::<f64>::make()
            .into_iter()
            .filter(|op| {
                !matches!(
                    op.repr(),
                    "*" | "/" | "ln" | "log" | "log2" | "log10" | "atanh"
                )
            })
            .collect();
        // A pole (ln(0), atanh(1)) is undefined, as below for division by zero.
        ops.push(Operator::make_unary("ln", |a| undefined_at_pole(a.ln())));
        ops.push(Operator::make_unary("log", |a| undefined_at_pole(a.ln())));
        ops.push(Operator::make_unary("log2", |a| {
            undefined_at_pole(a.log2())
        }));
        ops.push(Operator::make_unary("log10", |a| {
            undefined_at_pole(a.log10())
        }));
        ops.push(Operator::make_unary("atanh", |a| {
            undefined_at_pole(a.atanh())
        }));
        ops.push(Operator::make_bin("*", multiplicative(|a, b| a * b)));
        // Division by zero is undefined (NaN), not infinite: an infinite result then always
        // means the number grew past what a float holds, and the message can say which.
        ops.push(Operator::make_bin(
            "/",
            multiplicative(|a, b| if b == 0.0 { f64::NAN } else { a / b }),
        ));
        ops.push(Operator::make_bin("%", multiplicative(floored_modulo)));
        // exmex has `PI` and `π`; models mostly write `pi`. As an operator it is matched as a
        // whole token, so names like `pix` stay unknown names.
        ops.push(Operator::make_constant("pi", std::f64::consts::PI));
        ops
    }
}

/// A function's infinite value at a pole (ln(0) = -inf) is no number: NaN, so that only a
/// result too large for a float reads as an overflow.
fn undefined_at_pole(value: f64) -> f64 {
    if value.is_infinite() { f64::NAN } else { value }
}

/// Modulo with the sign of the divisor (Python, spreadsheets), so `-7 % 3` is 2.
fn floored_modulo(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r != 0.0 && (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

/// Number literals with an optional exponent (`6.022e23`), which exmex's default matcher lacks.
#[derive(Clone, Debug)]
struct NumberLiteral;

impl MatchLiteral for NumberLiteral {
    fn is_literal(text: &str) -> Option<&str> {
        match number_len(text) {
            0 => None,
            n => text.get(..n),
        }
    }
}

/// Byte length of the number literal at the start of `text`, 0 if there is none.
fn number_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    let digits_from = |start: usize| {
        bytes.get(start..).map_or(0, |rest| {
            rest.iter().take_while(|b| b.is_ascii_digit()).count()
        })
    };
    let int = digits_from(0);
    let mut len = int;
    let mut frac = 0;
    if bytes.get(len) == Some(&b'.') {
        frac = digits_from(len + 1);
        len += 1 + frac;
    }
    if int + frac == 0 {
        return 0;
    }
    if matches!(bytes.get(len), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(len + 1), Some(b'+' | b'-')));
        let exp = digits_from(len + 1 + sign);
        // Without digits the `e` is not an exponent: `2e` is 2 followed by Euler's number.
        if exp > 0 {
            len += 1 + sign + exp;
        }
    }
    len
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok<'a> {
    Num(&'a str),
    Name(&'a str),
    /// exmex's `{any text}` variable syntax; always an unknown name here.
    Braced(&'a str),
    Op(char),
    Open,
    Close,
    Comma,
}

#[derive(Clone, Copy, Debug)]
struct Token<'a> {
    tok: Tok<'a>,
    /// 1-based char column, for messages.
    col: usize,
}

/// Names exmex accepts as variables; mirrored so we see the same tokens it will.
fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || ('α'..='ω').contains(&c) || ('Α'..='Ω').contains(&c)
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

fn lex(src: &str) -> Result<Vec<Token<'_>>, String> {
    let mut tokens = Vec::new();
    let mut rest = src;
    let mut col = 1;
    while let Some(c) = rest.chars().next() {
        let (tok, len) = if c.is_whitespace() {
            (None, c.len_utf8())
        } else if c.is_ascii_digit() || c == '.' {
            let len = number_len(rest);
            let literal = rest.get(..len).unwrap_or_default();
            match literal.parse::<f64>() {
                Ok(v) if v.is_finite() => {}
                Ok(_) => {
                    return Err(format!(
                        "number {literal} is too large for a 64-bit float (max about 1.8e308)"
                    ));
                }
                Err(_) => {
                    return Err(format!(
                        "cannot read a number at position {col}; \
                         write numbers like 42, 0.5 or 1.5e3"
                    ));
                }
            }
            (Some(Tok::Num(literal)), len)
        } else if is_name_start(c) {
            let len = rest
                .char_indices()
                .find(|(_, c)| !is_name_char(*c))
                .map_or(rest.len(), |(i, _)| i);
            (Some(Tok::Name(rest.get(..len).unwrap_or_default())), len)
        } else if c == '{' {
            let inner = rest.get(1..).unwrap_or_default();
            let name_len = inner.find('}').unwrap_or(inner.len());
            let closing = usize::from(name_len < inner.len());
            let name = inner.get(..name_len).unwrap_or_default();
            (Some(Tok::Braced(name)), 1 + name_len + closing)
        } else if rest.starts_with("**") {
            // Python's power operator; models write it out of habit.
            (Some(Tok::Op('^')), 2)
        } else {
            let tok = match c {
                '(' => Tok::Open,
                ')' => Tok::Close,
                ',' => Tok::Comma,
                '+' | '-' | '*' | '/' | '%' | '^' => Tok::Op(c),
                _ => {
                    return Err(format!(
                        "unexpected character \"{c}\" at position {col}; {SYNTAX_HINT}"
                    ));
                }
            };
            (Some(tok), c.len_utf8())
        };
        if let Some(tok) = tok {
            tokens.push(Token { tok, col });
        }
        let (consumed, tail) = rest.split_at(len.min(rest.len()));
        col += consumed.chars().count();
        rest = tail;
    }
    Ok(tokens)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum NameKind {
    Constant,
    Function,
    /// Two-argument functions (`max`, `min`, `atan2`), which exmex treats as infix operators.
    Binary,
}

fn name_kind(name: &str, ops: &[Operator<'_, f64>]) -> Option<NameKind> {
    let op = ops.iter().find(|op| op.repr() == name)?;
    Some(if op.constant().is_some() {
        NameKind::Constant
    } else if op.has_bin() {
        NameKind::Binary
    } else {
        NameKind::Function
    })
}

fn function_names(ops: &[Operator<'_, f64>]) -> String {
    let mut names: Vec<&str> = ops
        .iter()
        .map(|op| op.repr())
        .filter(|repr| {
            repr.chars().all(is_name_char)
                && matches!(
                    name_kind(repr, ops),
                    Some(NameKind::Function | NameKind::Binary)
                )
        })
        .collect();
    names.sort_unstable();
    names.join(", ")
}

fn unknown_name(name: &str) -> String {
    format!("unknown name \"{name}\"; calculate takes numbers only, no variables")
}

/// Per parenthesis level: what the checker must remember about the operands seen so far.
#[derive(Default)]
struct Level<'a> {
    /// The two-argument function this level is the argument list of.
    binary_fn: Option<&'a str>,
    comma_seen: bool,
    /// A unary minus whose operand has not been closed by a binary operator yet.
    minus_pending: bool,
    /// A `^` whose right operand has not been closed by another binary operator yet.
    power_pending: bool,
}

/// A name must be a known constant, or a known function followed by its parentheses.
fn check_name(name: &str, next: Option<Tok<'_>>, ops: &[Operator<'_, f64>]) -> Result<(), String> {
    match name_kind(name, ops) {
        None if next == Some(Tok::Open) => Err(format!(
            "unknown function \"{name}\"; available: {}",
            function_names(ops)
        )),
        None => Err(unknown_name(name)),
        Some(NameKind::Function) if next != Some(Tok::Open) => Err(format!(
            "function \"{name}\" needs parentheses: write {name}(x)"
        )),
        Some(NameKind::Binary) if next != Some(Tok::Open) => Err(format!(
            "function \"{name}\" takes two arguments: write {name}(a, b)"
        )),
        _ => Ok(()),
    }
}

/// Reject what exmex would misread or explain badly, with a message that says what to write.
fn check(tokens: &[Token<'_>], ops: &[Operator<'_, f64>]) -> Result<(), String> {
    let mut levels = vec![Level::default()];
    let mut prev: Option<Tok<'_>> = None;
    for (i, token) in tokens.iter().enumerate() {
        let col = token.col;
        let next = tokens.get(i + 1).map(|t| t.tok);
        match token.tok {
            Tok::Braced(name) => return Err(unknown_name(name)),
            Tok::Name(name) => check_name(name, next, ops)?,
            _ => {}
        }
        let ends_value = matches!(prev, Some(Tok::Num(_) | Tok::Close))
            || matches!(prev, Some(Tok::Name(n)) if name_kind(n, ops) == Some(NameKind::Constant));
        let starts_value = matches!(token.tok, Tok::Num(_) | Tok::Name(_) | Tok::Open);
        if ends_value && starts_value {
            return Err(format!(
                "missing operator before position {col}; implicit multiplication is not \
                 supported, write 2*x instead of 2x or 2(x)"
            ));
        }
        let level = levels.len();
        match token.tok {
            Tok::Open => {
                let binary_fn = match prev {
                    Some(Tok::Name(n)) if name_kind(n, ops) == Some(NameKind::Binary) => Some(n),
                    _ => None,
                };
                if matches!(next, Some(Tok::Close | Tok::Comma)) {
                    return Err(format!("empty parentheses at position {col}"));
                }
                levels.push(Level {
                    binary_fn,
                    ..Level::default()
                });
            }
            Tok::Comma => {
                let top = levels.last_mut().filter(|_| level > 1);
                match top {
                    Some(Level {
                        binary_fn: Some(name),
                        comma_seen,
                        minus_pending,
                        power_pending,
                    }) => {
                        if *comma_seen {
                            return Err(format!(
                                "function \"{name}\" takes exactly two arguments: \
                                 write {name}(a, b)"
                            ));
                        }
                        *comma_seen = true;
                        *minus_pending = false;
                        *power_pending = false;
                    }
                    _ => {
                        return Err(format!(
                            "unexpected \",\" at position {col}; commas only separate the two \
                             arguments of max(a, b), min(a, b), atan2(y, x), and numbers take \
                             no thousands separators"
                        ));
                    }
                }
                if matches!(next, Some(Tok::Close | Tok::Comma) | None) {
                    return Err(format!("missing argument after \",\" at position {col}"));
                }
            }
            Tok::Close => {
                if level == 1 {
                    return Err(format!(
                        "unbalanced parentheses: \")\" at position {col} has no matching \"(\""
                    ));
                }
                if let Some(Level {
                    binary_fn: Some(name),
                    comma_seen: false,
                    ..
                }) = levels.pop()
                {
                    return Err(format!(
                        "function \"{name}\" takes two arguments: write {name}(a, b)"
                    ));
                }
            }
            Tok::Op(op) => {
                let unary = matches!(prev, None | Some(Tok::Open | Tok::Comma | Tok::Op(_)));
                if unary && !matches!(op, '+' | '-') {
                    return Err(format!(
                        "operator \"{op}\" at position {col} has no value on its left"
                    ));
                }
                if matches!(next, None | Some(Tok::Close | Tok::Comma)) {
                    return Err(format!(
                        "operator \"{op}\" at position {col} has no value on its right"
                    ));
                }
                if let Some(top) = levels.last_mut() {
                    if unary {
                        top.minus_pending |= op == '-';
                    } else if op == '^' {
                        // exmex evaluates `2^3^2` as (2^3)^2 and `-2^2` as (-2)^2; most
                        // readers expect the opposite, so we ask for explicit parentheses.
                        if top.power_pending {
                            return Err(format!(
                                "chained \"^\" at position {col} is ambiguous; \
                                 write (a^b)^c or a^(b^c)"
                            ));
                        }
                        if top.minus_pending {
                            return Err(format!(
                                "\"-\" before \"^\" at position {col} is ambiguous; \
                                 write (-a)^b or -(a^b)"
                            ));
                        }
                        top.power_pending = true;
                    } else {
                        top.minus_pending = false;
                        top.power_pending = false;
                    }
                }
            }
            Tok::Num(_) | Tok::Name(_) | Tok::Braced(_) => {}
        }
        prev = Some(token.tok);
    }
    match levels.len() {
        1 => Ok(()),
        n => Err(format!(
            "unbalanced parentheses: {} \"(\" not closed",
            n - 1
        )),
    }
}

/// Turn `max(a, b)` into `((a) max (b))`: exmex's own comma handling fails on nested calls
/// such as `max(1, min(2, 3))`, its infix form does not. Expects tokens that passed `check`.
fn rewrite_binary_calls(tokens: &[Token<'_>], ops: &[Operator<'_, f64>]) -> String {
    let mut parts: Vec<&str> = Vec::with_capacity(tokens.len() + 8);
    let mut frames: Vec<Option<&str>> = Vec::new();
    let mut pending_fn: Option<&str> = None;
    for token in tokens {
        match token.tok {
            Tok::Name(name) if name_kind(name, ops) == Some(NameKind::Binary) => {
                pending_fn = Some(name);
            }
            Tok::Open => {
                let binary_fn = pending_fn.take();
                parts.push(if binary_fn.is_some() { "( (" } else { "(" });
                frames.push(binary_fn);
            }
            Tok::Comma => {
                if let Some(Some(name)) = frames.last() {
                    parts.extend([")", *name, "("]);
                }
            }
            Tok::Close => {
                parts.push(match frames.pop() {
                    Some(Some(_)) => ") )",
                    _ => ")",
                });
            }
            Tok::Num(text) | Tok::Name(text) => parts.push(text),
            Tok::Op(op) => parts.push(match op {
                '+' => "+",
                '-' => "-",
                '*' => "*",
                '/' => "/",
                '%' => "%",
                _ => "^",
            }),
            // `check` rejects braced names; dropping one here cannot make a wrong result pass.
            Tok::Braced(_) => {}
        }
    }
    parts.join(" ")
}

fn run_exmex(text: &str) -> Result<f64, String> {
    let expr = FlatEx::<f64, CalcOps, NumberLiteral>::parse(text).map_err(|e| explain(e.msg()))?;
    if let Some(name) = expr.var_names().first() {
        return Err(unknown_name(name));
    }
    expr.eval(&[]).map_err(|e| explain(e.msg()))
}

/// One readable line from an exmex message, without the Debug dumps some of them carry.
fn explain(msg: &str) -> String {
    let msg = msg.strip_prefix("wlog ").unwrap_or(msg);
    let msg = match msg.find("Operator {") {
        Some(at) => msg.get(..at).unwrap_or(msg),
        None => msg,
    };
    let msg = msg.trim_end_matches([' ', ',']);
    let msg: String = msg.chars().take(200).collect();
    format!("invalid expression: {msg}; {SYNTAX_HINT}")
}

/// Integers in full, everything else to 12 significant digits, `%g`-style.
fn format_number(v: f64) -> Result<String, String> {
    if v.is_infinite() {
        return Err(
            "overflow: the result is beyond ±1.8e308, the largest number calculate holds; scale the numbers down (work in thousands or logarithms)"
                .to_string(),
        );
    }
    if v.is_nan() {
        return Err("division by zero or undefined result".to_string());
    }
    if v.fract() == 0.0 && v.abs() < INTEGER_LIMIT {
        // Exact: |v| < 1e15 fits i64, and `as` maps -0.0 to 0.
        return Ok(format!("{}", v as i64));
    }
    let scientific = format!("{:.*e}", SIG_DIGITS - 1, v);
    let Some((mantissa, exp)) = scientific
        .split_once('e')
        .and_then(|(m, e)| Some((m, e.parse::<i32>().ok()?)))
    else {
        return Ok(v.to_string());
    };
    // The exponent after rounding decides the notation, as in C's %g with precision 12.
    if (-4..SIG_DIGITS as i32).contains(&exp) {
        let decimals = (SIG_DIGITS as i32 - 1 - exp).unsigned_abs() as usize;
        Ok(trim_fraction(&format!("{v:.decimals$}")).to_string())
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        Ok(format!(
            "{}e{sign}{}",
            trim_fraction(mantissa),
            exp.unsigned_abs()
        ))
    }
}

fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn ok(expr: &str) -> String {
        match evaluate(expr) {
            Ok(v) => v,
            Err(e) => panic!("{expr:?} failed: {e}"),
        }
    }

    fn err(expr: &str) -> String {
        match evaluate(expr) {
            Ok(v) => panic!("{expr:?} gave {v}, expected an error"),
            Err(e) => e,
        }
    }

    #[test]
    fn integers_print_without_a_decimal_point() {
        assert_eq!(ok("2+2"), "4");
        assert_eq!(ok("-3*4"), "-12");
        assert_eq!(ok("0.5*4"), "2");
        assert_eq!(ok("-0"), "0");
        assert_eq!(ok("1e15-1"), "999999999999999");
    }

    #[test]
    fn fractions_print_twelve_significant_digits_without_trailing_zeros() {
        assert_eq!(ok("1/3"), "0.333333333333");
        assert_eq!(ok("2/3"), "0.666666666667");
        assert_eq!(ok("PI"), "3.14159265359");
        assert_eq!(ok("0.1+0.2"), "0.3");
        assert_eq!(ok("2.5*1.5"), "3.75");
        assert_eq!(ok("-1/8"), "-0.125");
        assert_eq!(ok("0.0001"), "0.0001");
    }

    #[test]
    fn large_and_small_numbers_print_in_scientific_notation() {
        assert_eq!(ok("1.5e20"), "1.5e+20");
        assert_eq!(ok("10^15"), "1e+15");
        assert_eq!(ok("2^53"), "9.00719925474e+15");
        assert_eq!(ok("0.00001234"), "1.234e-5");
        assert_eq!(ok("3E-7"), "3e-7");
        assert_eq!(ok("-6.022e23"), "-6.022e+23");
        assert_eq!(ok("1e12+0.5"), "1e+12");
    }

    #[test]
    fn operators_follow_the_usual_precedence_left_to_right() {
        assert_eq!(ok("2+3*4^2"), "50");
        assert_eq!(ok("10-2+3"), "11");
        assert_eq!(ok("1-2-3"), "-4");
        assert_eq!(ok("8/2/2"), "2");
        assert_eq!(ok("8/2*4"), "16");
        assert_eq!(ok("(1+2)*3"), "9");
        assert_eq!(ok("2*-3"), "-6");
        assert_eq!(ok("--1"), "1");
        assert_eq!(ok("1-+-2"), "3");
        assert_eq!(ok("2^-1"), "0.5");
        assert_eq!(ok("2**10"), "1024");
        assert_eq!(ok(" 1 +\t2\n"), "3");
    }

    #[test]
    fn modulo_takes_the_sign_of_the_divisor_and_binds_like_multiplication() {
        assert_eq!(ok("17 % 5"), "2");
        assert_eq!(ok("-7 % 3"), "2");
        assert_eq!(ok("7 % -3"), "-2");
        assert_eq!(ok("7 % 3 * 2"), "2");
        assert_eq!(ok("6 * 7 % 4"), "2");
        assert_eq!(ok("9 % 4 / 2"), "0.5");
        assert_eq!(ok("5.5 % 2"), "1.5");
        assert_eq!(err("5 % 0"), "division by zero or undefined result");
    }

    #[test]
    fn functions_and_constants_evaluate() {
        assert_eq!(ok("sqrt(16)"), "4");
        assert_eq!(ok("sin(pi/2)"), "1");
        assert_eq!(ok("cos(0)"), "1");
        assert_eq!(ok("tan(0)"), "0");
        assert_eq!(ok("ln(e)"), "1");
        assert_eq!(ok("log(E)"), "1");
        assert_eq!(ok("log10(1000)"), "3");
        assert_eq!(ok("log2(8)"), "3");
        assert_eq!(ok("exp(1)"), "2.71828182846");
        assert_eq!(ok("abs(-2.5)"), "2.5");
        assert_eq!(ok("floor(2.7)+ceil(2.1)+round(2.5)"), "8");
        assert_eq!(ok("π"), "3.14159265359");
        assert_eq!(ok("pi*2 - TAU"), "0");
        assert_eq!(ok("sin(1)^2 + cos(1)^2"), "1");
    }

    #[test]
    fn two_argument_functions_nest() {
        assert_eq!(ok("max(2, 3)"), "3");
        assert_eq!(ok("max(2, min(5, 3))"), "3");
        assert_eq!(ok("min(max(1, 2), max(3, 4)) * 2"), "4");
        assert_eq!(ok("max(1, 2)^2"), "4");
        assert_eq!(ok("atan2(1, 1)*4"), "3.14159265359");
        assert_eq!(
            err("max(1)"),
            "function \"max\" takes two arguments: write max(a, b)"
        );
        assert_eq!(
            err("max(1, 2, 3)"),
            "function \"max\" takes exactly two arguments: write max(a, b)"
        );
    }

    #[test]
    fn ambiguous_powers_ask_for_parentheses() {
        assert_eq!(
            err("-2^2"),
            "\"-\" before \"^\" at position 3 is ambiguous; write (-a)^b or -(a^b)"
        );
        assert_eq!(
            err("2^3^2"),
            "chained \"^\" at position 4 is ambiguous; write (a^b)^c or a^(b^c)"
        );
        assert_eq!(ok("(-2)^2"), "4");
        assert_eq!(ok("-(2^2)"), "-4");
        assert_eq!(ok("(2^3)^2"), "64");
        assert_eq!(ok("2^(3^2)"), "512");
        assert_eq!(ok("-2*3^2"), "-18");
        assert_eq!(ok("2^3*2^2"), "32");
    }

    #[test]
    fn unbound_names_are_rejected_as_variables() {
        let msg = "unknown name \"x\"; calculate takes numbers only, no variables";
        assert_eq!(err("x+1"), msg);
        assert_eq!(err("2x"), msg);
        assert_eq!(err("{x}"), msg);
        assert_eq!(
            err("pix"),
            "unknown name \"pix\"; calculate takes numbers only, no variables"
        );
        assert_eq!(
            err("maximum"),
            "unknown name \"maximum\"; calculate takes numbers only, no variables"
        );
    }

    #[test]
    fn unknown_function_lists_the_available_ones() {
        assert_eq!(
            err("foo(2)"),
            "unknown function \"foo\"; available: abs, acos, acosh, asin, asinh, atan, atan2, \
             atanh, cbrt, ceil, cos, cosh, exp, floor, fract, ln, log, log10, log2, max, min, \
             round, signum, sin, sinh, sqrt, tan, tanh, trunc"
        );
    }

    #[test]
    fn malformed_expressions_say_what_to_fix() {
        let implicit = "missing operator before position 2; implicit multiplication is not \
                        supported, write 2*x instead of 2x or 2(x)";
        assert_eq!(err("2(3)"), implicit);
        assert_eq!(err("2pi"), implicit);
        assert_eq!(
            err("1 2"),
            "missing operator before position 3; implicit multiplication is not supported, \
             write 2*x instead of 2x or 2(x)"
        );
        assert_eq!(
            err("sqrt 4"),
            "function \"sqrt\" needs parentheses: write sqrt(x)"
        );
        assert_eq!(err("(1+2"), "unbalanced parentheses: 1 \"(\" not closed");
        assert_eq!(
            err("1+2)"),
            "unbalanced parentheses: \")\" at position 4 has no matching \"(\""
        );
        assert_eq!(err("()"), "empty parentheses at position 1");
        assert_eq!(
            err("1+"),
            "operator \"+\" at position 2 has no value on its right"
        );
        assert_eq!(
            err("*2"),
            "operator \"*\" at position 1 has no value on its left"
        );
        assert_eq!(
            err("1+*2"),
            "operator \"*\" at position 3 has no value on its left"
        );
        assert_eq!(
            err("1,000"),
            "unexpected \",\" at position 2; commas only separate the two arguments of \
             max(a, b), min(a, b), atan2(y, x), and numbers take no thousands separators"
        );
        assert_eq!(
            err("3 € 4"),
            "unexpected character \"€\" at position 3; use numbers, + - * / % ^, parentheses \
             and functions such as sqrt(x), ln(x), sin(x)"
        );
        assert_eq!(
            err("."),
            "cannot read a number at position 1; write numbers like 42, 0.5 or 1.5e3"
        );
    }

    #[test]
    fn undefined_results_are_errors() {
        let msg = "division by zero or undefined result";
        assert_eq!(err("1/0"), msg);
        assert_eq!(err("0/0"), msg);
        assert_eq!(err("sqrt(-1)"), msg);
        assert_eq!(err("ln(0)"), msg);
        assert_eq!(err("log10(0)"), msg);
        assert_eq!(err("atanh(1)"), msg);
        assert_eq!(err("1/(2-2)"), msg);
        let overflow = "overflow: the result is beyond ±1.8e308, the largest number calculate holds; scale the numbers down (work in thousands or logarithms)";
        assert_eq!(err("10^400"), overflow);
        assert_eq!(err("2^1024"), overflow);
        assert_eq!(err("exp(1000)"), overflow);
        assert_eq!(err("-(1e308*10)"), overflow);
    }

    #[test]
    fn empty_and_overlong_input_is_rejected() {
        let empty = "empty expression; pass one arithmetic expression such as 2*(3+4)";
        assert_eq!(err(""), empty);
        assert_eq!(err(" \t\n"), empty);
        let long = "1+".repeat(500) + "1";
        assert_eq!(err(&long), "expression too long (1001 chars, max 1000)");
        assert_eq!(ok(&("1+".repeat(499) + "1")), "500");
    }

    #[test]
    fn exmex_messages_lose_their_debug_dumps() {
        assert_eq!(
            explain(
                "a binary operator cannot be on the right of another operator, Operator { \
                 repr: \"*\", bin_op: Some(BinOp { apply: 0x1, prio: 2 }) } next to (3, ..)"
            ),
            "invalid expression: a binary operator cannot be on the right of another \
             operator; use numbers, + - * / % ^, parentheses and functions such as sqrt(x), \
             ln(x), sin(x)"
        );
        assert_eq!(
            explain("wlog an opening paren cannot be next to a closing paren, left: (; right: )"),
            "invalid expression: an opening paren cannot be next to a closing paren, left: (; \
             right: ); use numbers, + - * / % ^, parentheses and functions such as sqrt(x), \
             ln(x), sin(x)"
        );
    }

    #[test]
    fn hostile_inputs_return_errors_or_values_without_panicking() {
        let deep = |n: usize| "(".repeat(n) + "1" + &")".repeat(n);
        assert_eq!(ok(&deep(499)), "1");
        assert_eq!(
            err(&deep(500)),
            "expression too long (1001 chars, max 1000)"
        );
        assert_eq!(ok(&("-(".repeat(300) + "2" + &")".repeat(300))), "2");
        assert_eq!(ok(&("sqrt(".repeat(150) + "1" + &")".repeat(150))), "1");
        assert_eq!(ok(&("-".repeat(998) + "1")), "1");
        assert_eq!(
            err("1e400"),
            "number 1e400 is too large for a 64-bit float (max about 1.8e308)"
        );
        assert_eq!(ok("--1"), "1");
        assert_eq!(
            err("αβγ"),
            "unknown name \"αβγ\"; calculate takes numbers only, no variables"
        );
        assert_eq!(
            err("1 + 🦀"),
            "unexpected character \"🦀\" at position 5; use numbers, + - * / % ^, \
             parentheses and functions such as sqrt(x), ln(x), sin(x)"
        );
        assert_eq!(
            err("{"),
            "unknown name \"\"; calculate takes numbers only, no variables"
        );
        for hostile in [
            "1..2", "1.2.3", "2e", "1e", "1e+", ".e5", "((", "))", ")(", ",", "(,)", "max(,)",
            "max", "max(1,)", "PI()", "sin()", "e^", "^", "%", "-", "+-+-", "1 % % 2", "\u{0}",
            "\u{200b}", "٣", "１", "{}", "{1+1}", "2^^2", "1e308*10", "(((1)",
        ] {
            assert!(evaluate(hostile).is_err(), "{hostile:?} should be an error");
        }
    }

    #[test]
    fn pseudo_random_inputs_never_panic() {
        // A fixed LCG keeps this reproducible; the alphabet covers every token class.
        const ALPHABET: &[&str] = &[
            "1", "2.5", "0", "1e3", ".", "e", "pi", "x", "(", ")", ",", "+", "-", "*", "/", "%",
            "^", "**", " ", "sin", "max", "min", "atan2", "{", "}", "é", "π",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..3000 {
            let mut text = String::new();
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            let len = (state >> 59) as usize + 1;
            for _ in 0..len {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                text.push_str(ALPHABET[(state >> 33) as usize % ALPHABET.len()]);
            }
            // Every input gets an answer or a message the model can read, never a panic.
            let answer = evaluate(&text).unwrap_or_else(|e| e);
            assert!(!answer.trim().is_empty(), "{text:?} gave an empty answer");
        }
    }
}
