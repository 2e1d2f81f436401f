//! The patch engine of edit_file on bytes: matching, insertion, line endings, and the messages
//! a model gets when its old_string does not match exactly once.

use pretty_assertions::assert_eq;

use super::*;

fn replace_t(old: &str, new: &str) -> TargetArg {
    TargetArg {
        old_string: Some(old.into()),
        new_string: Some(new.into()),
        replace_all: None,
        insert_string: None,
        row: None,
    }
}

fn insert_t(text: &str, row: u64) -> TargetArg {
    TargetArg {
        old_string: None,
        new_string: None,
        replace_all: None,
        insert_string: Some(text.into()),
        row: Some(row),
    }
}

fn patch(original: &str, targets: &[TargetArg]) -> Result<String, String> {
    apply_targets(original.as_bytes(), targets, "f.txt")
        .map(|o| String::from_utf8(o.bytes).unwrap())
        .map_err(|e| e.to_string())
}

#[test]
fn targets_apply_in_order() {
    let out = patch(
        "fn a() {}\nfn b() {}\n",
        &[
            replace_t("fn a()", "fn alpha()"),
            replace_t("alpha", "omega"),
        ],
    )
    .unwrap();
    assert_eq!(out, "fn omega() {}\nfn b() {}\n");
}

#[test]
fn replace_all_changes_every_match() {
    let mut t = replace_t("x", "y");
    t.replace_all = Some(true);
    assert_eq!(patch("x1 x2\nx3\n", &[t]).unwrap(), "y1 y2\ny3\n");
}

#[test]
fn a_replace_all_that_would_explode_the_file_is_refused_before_allocating() {
    // 2 MB of matches, each replaced by 1 MiB: 2 TB if allocated up front.
    let original = "a".repeat(2_000_000);
    let mut t = replace_t("a", &"b".repeat(1 << 20));
    t.replace_all = Some(true);
    let err = patch(&original, &[t]).unwrap_err();
    assert!(err.contains("larger than"), "{err}");
}

#[test]
fn insertion_rows_keep_the_final_newline_state() {
    assert_eq!(
        patch("a\nb\n", &[insert_t("top", 1)]).unwrap(),
        "top\na\nb\n"
    );
    assert_eq!(
        patch("a\nb\n", &[insert_t("mid\n", 2)]).unwrap(),
        "a\nmid\nb\n"
    );
    assert_eq!(
        patch("a\nb\n", &[insert_t("end", 3)]).unwrap(),
        "a\nb\nend\n"
    );
    // No final newline before: none after.
    assert_eq!(patch("a\nb", &[insert_t("end", 3)]).unwrap(), "a\nb\nend");
    assert_eq!(patch("a\nb", &[insert_t("x\ny", 2)]).unwrap(), "a\nx\ny\nb");
    assert_eq!(patch("", &[insert_t("only", 1)]).unwrap(), "only\n");
    assert_eq!(patch("a\n", &[insert_t("\n", 1)]).unwrap(), "\na\n");
}

#[test]
fn a_row_outside_the_file_names_the_valid_range() {
    let err = patch("a\nb\n", &[insert_t("x", 4)]).unwrap_err();
    assert!(err.contains("has 2 line(s); use 1 to 3"), "{err}");
    let err = patch("a\nb\n", &[insert_t("x", 0)]).unwrap_err();
    assert!(err.contains("row 0"), "{err}");
    let err = patch("a\n", &[insert_t("x", u64::MAX)]).unwrap_err();
    assert!(err.contains("outside the file"), "{err}");
}

#[test]
fn crlf_files_stay_crlf() {
    let original = "one\r\ntwo\r\nthree\r\n";
    let out = patch(original, &[replace_t("one\ntwo", "1\n2\n2b")]).unwrap();
    assert_eq!(out, "1\r\n2\r\n2b\r\nthree\r\n");
    let out = patch(original, &[insert_t("zero\nhalf", 1)]).unwrap();
    assert_eq!(out, "zero\r\nhalf\r\none\r\ntwo\r\nthree\r\n");
    let out = patch("a\r\nb", &[insert_t("c", 3)]).unwrap();
    assert_eq!(out, "a\r\nb\r\nc");
}

#[test]
fn non_utf8_files_are_patched_on_bytes() {
    // Latin-1 "café = 1\n": the ASCII part can be patched, the é byte is kept.
    let original = b"caf\xe9 = 1\nother\n".to_vec();
    let out = apply_targets(&original, &[replace_t("= 1", "= 2")], "f").unwrap();
    assert_eq!(out.bytes, b"caf\xe9 = 2\nother\n".to_vec());
    // The replacement character read_files shows never matches, and the message says why.
    let err = apply_targets(&original, &[replace_t("caf\u{FFFD} = 1", "x")], "f")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not UTF-8") && err.contains("U+FFFD"), "{err}");
}

#[test]
fn a_missing_old_string_shows_a_whitespace_insensitive_match() {
    let file = "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n";
    let err = patch(file, &[replace_t("let x = 1;\nprintln!(\"{x}\");", "")]).unwrap_err();
    assert!(
        err.contains("lines 2-3 match if whitespace is ignored"),
        "{err}"
    );
    assert!(err.contains("    2|     let x = 1;"), "{err}");
    assert!(err.contains("No target was applied"), "{err}");
}

#[test]
fn a_missing_old_string_shows_where_the_same_first_line_parts() {
    let file = "a\nfn f() {\n    one();\n    two();\n}\n";
    let err = patch(file, &[replace_t("fn f() {\n    one();\n    three();", "")]).unwrap_err();
    assert!(
        err.contains("line 2 holds old_string's first line"),
        "{err}"
    );
    assert!(
        err.contains("old_string's line 3 differs from the file's line 4"),
        "{err}"
    );
    assert!(err.contains("\"    two();\""), "{err}");
}

#[test]
fn a_missing_old_string_shows_the_most_similar_line() {
    let file = "alpha beta\nlet counter_value = compute(1);\nzeta\n";
    let err = patch(file, &[replace_t("let counter_valu = compute(2);", "")]).unwrap_err();
    assert!(err.contains("line 2 is the most similar"), "{err}");
    assert!(!err.contains("line 1 is"), "{err}");
}

#[test]
fn a_missing_old_string_with_no_resemblance_says_so() {
    let err = patch("abc\n", &[replace_t("zzzzzzzz qqqq", "")]).unwrap_err();
    assert!(err.contains("no line resembles it"), "{err}");
}

#[test]
fn an_ambiguous_old_string_lists_every_line() {
    let err = patch("x\ny\nx\nz\nx\n", &[replace_t("x", "w")]).unwrap_err();
    assert!(
        err.contains("matches 3 places, starting at lines 1, 3, 5"),
        "{err}"
    );
    assert!(err.contains("replace_all=true"), "{err}");
}

#[test]
fn a_failing_later_target_fails_them_all() {
    let err = patch("a\nb\n", &[replace_t("a", "A"), replace_t("nope", "x")]).unwrap_err();
    assert!(err.starts_with("targets[1]:"), "{err}");
    assert!(err.contains("count after the earlier targets"), "{err}");
}

#[test]
fn malformed_targets_are_named() {
    let mut mixed = replace_t("a", "b");
    mixed.row = Some(1);
    let cases: Vec<(TargetArg, &str)> = vec![
        (mixed, "separate targets"),
        (replace_t("", "x"), "old_string is empty"),
        (replace_t("a", "a"), "identical"),
        (
            TargetArg {
                new_string: None,
                ..replace_t("a", "")
            },
            "new_string is missing",
        ),
        (
            TargetArg {
                old_string: None,
                ..replace_t("", "x")
            },
            "new_string needs old_string",
        ),
        (
            TargetArg {
                row: None,
                ..insert_t("x", 1)
            },
            "row is missing",
        ),
        (insert_t("", 1), "insert_string is missing or empty"),
        (
            TargetArg {
                replace_all: Some(true),
                ..insert_t("x", 1)
            },
            "replace_all applies to old_string",
        ),
        (
            TargetArg {
                old_string: None,
                new_string: None,
                replace_all: Some(true),
                insert_string: None,
                row: None,
            },
            "neither",
        ),
    ];
    for (target, expected) in cases {
        let err = patch("a\n", &[target]).unwrap_err();
        assert!(err.contains(expected), "{expected}: {err}");
    }
}

#[test]
fn crlf_is_decided_by_the_majority_of_line_breaks() {
    assert!(uses_crlf(b"a\r\nb\r\nc\n"));
    assert!(!uses_crlf(b"a\r\nb\nc\n"));
    assert!(!uses_crlf(b"a\nb\n"));
    assert!(!uses_crlf(b""));
}
