use super::*;
use pretty_assertions::assert_eq;

const PAGE: &str = "\
[Skip to content](#main)

We use cookies to improve your experience. [Accept all](/ok) [Privacy policy](/privacy)

* [Home](/)
* [Docs](/docs)

# Harbour guide

The harbour lies at the mouth of the river and dries at low water springs.

## Tides

High water at the quay is forty minutes after high water at the bar.

Spring tides run two knots in the narrows.

## Moorings

Visitors' moorings are in the pool below the bridge; the harbour office allocates them.

```
Mooring fee: 20 per night
© not a copyright line inside code
```

## History

The quay was built in 1820 for the slate trade, when schooners loaded roofing slate brought down the valley by a narrow-gauge railway. The railway closed in 1946 and the trade moved to the deep-water port along the coast; the warehouses became workshops and, later, the sailing club. A plaque by the steps names the masters who traded from here.

## Fuel

Diesel is sold at the fuel berth on the north quay from 8 to 6.

Share this: [Twitter](https://t/x) [Facebook](https://f/x)

* [Home](/)
* [Docs](/docs)

© 2026 Harbour Office. All rights reserved.";

const CLEAN: &str = "\
# Harbour guide

The harbour lies at the mouth of the river and dries at low water springs.

## Tides

High water at the quay is forty minutes after high water at the bar.

Spring tides run two knots in the narrows.

## Moorings

Visitors' moorings are in the pool below the bridge; the harbour office allocates them.

```
Mooring fee: 20 per night
© not a copyright line inside code
```

## History

The quay was built in 1820 for the slate trade, when schooners loaded roofing slate brought down the valley by a narrow-gauge railway. The railway closed in 1946 and the trade moved to the deep-water port along the coast; the warehouses became workshops and, later, the sailing club. A plaque by the steps names the masters who traded from here.

## Fuel

Diesel is sold at the fuel berth on the north quay from 8 to 6.";

fn run(text: &str, focus: Option<&str>, budget: usize) -> Filtered {
    DeterministicFilter.apply(text, focus, budget)
}

#[test]
fn boilerplate_goes_and_everything_else_stays_when_it_fits() {
    assert_eq!(
        run(PAGE, None, 10_000),
        Filtered {
            text: CLEAN.to_string(),
            note: None
        }
    );
    assert_eq!(
        run(PAGE, Some("fuel"), 10_000),
        Filtered {
            text: CLEAN.to_string(),
            note: None
        }
    );
}

#[test]
fn without_focus_the_head_of_the_page_is_kept() {
    let out = run(PAGE, None, 420);
    assert_eq!(
        out.text,
        "[filtered: kept the first 2 of 5 sections (215 bytes of 821 bytes); call again with a focus to get the sections about a topic]\n\n\
# Harbour guide\n\n\
The harbour lies at the mouth of the river and dries at low water springs.\n\n\
## Tides\n\n\
High water at the quay is forty minutes after high water at the bar.\n\n\
Spring tides run two knots in the narrows."
    );
}

#[test]
fn focus_keeps_the_most_relevant_sections_in_page_order() {
    let out = run(PAGE, Some("where to buy diesel fuel"), 300);
    assert_eq!(
        out,
        Filtered {
            text: "[filtered: kept 1 of 5 sections most relevant to \"where to buy diesel fuel\" (72 bytes of 821 bytes); call again with a different focus or fetch a narrower url for the rest]\n\n\
## Fuel\n\nDiesel is sold at the fuel berth on the north quay from 8 to 6."
                .to_string(),
            note: None,
        }
    );
    let two = run(PAGE, Some("tides mooring"), 700);
    assert_eq!(
        two.text,
        "[filtered: kept 2 of 5 sections most relevant to \"tides mooring\" (295 bytes of 821 bytes); call again with a different focus or fetch a narrower url for the rest]\n\n\
## Tides\n\n\
High water at the quay is forty minutes after high water at the bar.\n\n\
Spring tides run two knots in the narrows.\n\n\
## Moorings\n\n\
Visitors' moorings are in the pool below the bridge; the harbour office allocates them.\n\n\
```\nMooring fee: 20 per night\n© not a copyright line inside code\n```"
    );
}

#[test]
fn a_focus_nothing_matches_says_so_and_keeps_the_head() {
    let out = run(PAGE, Some("helicopter"), 300);
    assert_eq!(
        out.text,
        "[filtered: no section mentions \"helicopter\"; kept the first 1 of 5 sections (91 bytes of 821 bytes); call again with a different focus or fetch a narrower url]\n\n\
# Harbour guide\n\n\
The harbour lies at the mouth of the river and dries at low water springs."
    );
}

#[test]
fn same_input_same_output() {
    for budget in [0, 50, 200, 300, 420, 10_000] {
        assert_eq!(
            run(PAGE, Some("tides"), budget),
            run(PAGE, Some("tides"), budget)
        );
    }
}

#[test]
fn an_oversized_section_is_cut_on_a_char_boundary() {
    let text = "żółw ".repeat(400);
    let out = run(&text, None, 200);
    let (header, body) = out.text.split_once("\n\n").unwrap();
    assert_eq!(
        header,
        format!(
            "[filtered: kept the first 1 of 1 sections, the last one cut short ({} bytes of 3.1 KB); call again with a focus to get the sections about a topic]",
            body.len()
        )
    );
    // The header reserves room for its longest form ("1023 bytes of 3.1 KB", 148 bytes), which
    // leaves 50 bytes for the text; byte 50 falls inside "ó".
    assert_eq!(body, "żółw ".repeat(6) + "ż");
    assert!(out.text.len() <= 200);
}

#[test]
fn a_long_section_is_split_and_its_heading_repeated_for_a_part_shown_alone() {
    let paragraph = |i: usize| format!("Paragraph {i} about the quay wall and its granite blocks.");
    let filler: Vec<String> = (0..60).map(paragraph).collect();
    let text = format!(
        "## Quay\n\n{}\n\nThe old lighthouse keeper lived in the tower.\n\n## Other\n\nNothing here.",
        filler.join("\n\n")
    );
    // Parts are cut at 2000 bytes: "## Quay" and paragraphs 0–33 fill the first (1969 bytes).
    let second_part: Vec<String> = (34..60).map(paragraph).collect();
    let expected_body = format!(
        "## Quay (continued)\n{}\n\nThe old lighthouse keeper lived in the tower.",
        second_part.join("\n\n")
    );
    let out = run(&text, Some("lighthouse keeper"), 2500);
    assert_eq!(
        out.text,
        format!(
            "[filtered: kept 1 of 3 sections most relevant to \"lighthouse keeper\" (1.5 KB of 3.5 KB); call again with a different focus or fetch a narrower url for the rest]\n\n{expected_body}"
        )
    );
    assert_eq!(expected_body.len(), 1573);
}

#[test]
fn tiny_budgets_never_overflow() {
    for budget in 0..120 {
        let out = run(PAGE, Some("fuel"), budget);
        assert!(out.text.len() <= budget, "{budget}: {}", out.text.len());
    }
}

#[test]
fn stemming_matches_plural_and_ing_forms() {
    assert_eq!(
        focus_terms("How do I use the mooring buoys?"),
        vec!["moor".to_string(), "buoy".to_string()]
    );
    assert_eq!(stem("threads"), "thread");
    assert_eq!(stem("class"), "class");
}

proptest::proptest! {
    #[test]
    fn any_text_any_budget_fits(text in "(\\PC|\n|#|`){0,600}", budget in 0usize..700, focus in proptest::option::of("[a-zé ]{0,20}")) {
        let out = run(&text, focus.as_deref(), budget);
        proptest::prop_assert!(out.text.len() <= budget);
        proptest::prop_assert_eq!(out, run(&text, focus.as_deref(), budget));
    }
}

/// A one-request-at-a-time HTTP/1.1 responder on 127.0.0.1:0 that records what it was sent.
#[test]
fn a_model_gets_the_focus_the_budget_and_a_large_page_narrowed_first() {
    assert_eq!(
        model_request(PAGE, Some("diesel"), 2000),
        format!("Focus: diesel\nBudget: 2000 bytes\n\n<page>\n{PAGE}\n</page>")
    );
    assert!(model_request(PAGE, None, 10).starts_with("Focus: none (keep the main content)\n"));
    let huge = PAGE.repeat(MODEL_INPUT_MAX / PAGE.len() + 2);
    let sent = model_request(&huge, Some("diesel"), 2000);
    assert!(
        sent.len() < MODEL_INPUT_MAX + 200,
        "{} bytes sent",
        sent.len()
    );
}

#[test]
fn a_model_answer_is_cut_to_the_budget_and_a_failure_falls_back_with_a_note() {
    let answer = model_outcome(Ok("é".repeat(10)), PAGE, None, 5);
    assert_eq!(
        answer,
        Filtered {
            text: "éé".to_string(),
            note: None
        }
    );
    let failed = model_outcome(Err("HTTP 500".into()), PAGE, Some("fuel"), 300);
    assert_eq!(
        failed,
        Filtered {
            note: Some(
                "model filter unavailable (HTTP 500); showing the built-in filter's result"
                    .to_string()
            ),
            ..run(PAGE, Some("fuel"), 300)
        }
    );
}

#[test]
fn over_the_budget_without_focus_lists_of_links_give_way_to_the_story() {
    let related: String = (1..=12)
        .map(|i| format!("- Another story worth reading, number {i}\n"))
        .collect();
    let story =
        "The council voted on Tuesday to rebuild the harbour wall before winter. ".repeat(4);
    let text = format!(
        "# Harbour wall\n\n{story}\n\n## Related\n\n{related}\n## The vote\n\n{story}\n\n## Cost\n\n{story}"
    );
    let budget = text.len() - 150;
    let out = run(&text, None, budget);
    assert!(
        out.text.starts_with(
            "[filtered: kept 3 of 4 sections in page order, the text before lists of links ("
        ),
        "{}",
        out.text
    );
    // Every word of the story is kept, in order, and the list is what went.
    assert!(
        out.text.contains("## The vote") && out.text.contains("## Cost"),
        "{}",
        out.text
    );
    assert!(!out.text.contains("Another story"), "{}", out.text);
    assert_eq!(out.text.matches("rebuild the harbour wall").count(), 12);
    assert!(out.text.len() <= budget);
}
