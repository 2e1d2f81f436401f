use std::collections::HashSet;

use dispatch_engine::{Effect, Gate, Status, Tool};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::test_support::*;

fn entries() -> &'static [ApiEntry] {
    catalogue().unwrap()
}

fn args(v: serde_json::Value) -> PublicApiListArgs {
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_catalogue_parses_and_is_big_enough() {
    let entries = entries();
    assert!(entries.len() >= 80, "{} entries", entries.len());
    assert!(categories(entries).len() >= 12, "{:?}", categories(entries));
}

#[test]
fn every_entry_is_complete_with_an_https_url_and_a_unique_name() {
    let mut names = HashSet::new();
    for e in entries() {
        assert!(
            names.insert(e.name.to_lowercase()),
            "duplicate name {}",
            e.name
        );
        assert!(
            !e.name.trim().is_empty() && !e.category.trim().is_empty(),
            "{e:?}"
        );
        assert!(e.https, "{} is not https", e.name);
        let url = reqwest::Url::parse(&e.url).unwrap();
        assert_eq!(url.scheme(), "https", "{}", e.name);
        assert!(
            url.host_str().is_some_and(|h| h.contains('.')),
            "{}",
            e.name
        );
        assert!(
            e.description.len() >= 20 && e.description.len() <= 160,
            "{}: description of {} bytes",
            e.name,
            e.description.len()
        );
        assert!(e.description.ends_with('.'), "{}", e.name);
        if let Some(cors) = &e.cors {
            assert!(["yes", "no"].contains(&cors.as_str()), "{}", e.name);
        }
    }
}

#[test]
fn a_category_and_auth_filter_lists_exactly_the_matches() {
    let text = list(
        entries(),
        &args(json!({"category": "calendar & time", "auth": "apiKey"})),
    )
    .unwrap();
    assert_eq!(
        text,
        "1 API matching category=Calendar & Time, auth=apiKey:\n\
         - Calendarific [Calendar & Time] https://calendarific.com/api-documentation (auth: apiKey)\n  \
         National, local and religious holidays for 230 countries.\n\
         Call one with http_request(url=...); if you do not know its endpoints, read its docs URL with fetch_page first."
    );
}

#[test]
fn keywords_must_all_match_and_the_limit_says_how_many_were_left_out() {
    let text = list(entries(), &args(json!({"keyword": "EARTHQUAKE geojson"}))).unwrap();
    assert_eq!(
        text,
        "1 API matching keyword=\"EARTHQUAKE geojson\":\n\
         - USGS Earthquake Catalog [Science & Research] https://earthquake.usgs.gov/fdsnws/event/1/ (auth: none, CORS yes)\n  \
         Earthquake events as GeoJSON filtered by time, location and magnitude.\n\
         Call one with http_request(url=...); if you do not know its endpoints, read its docs URL with fetch_page first."
    );
    let weather_keyless = entries()
        .iter()
        .filter(|e| e.category == "Weather" && e.auth == Auth::None)
        .count();
    let text = list(
        entries(),
        &args(json!({"category": "Weather", "auth": "none", "limit": 2})),
    )
    .unwrap();
    let head = text.lines().next().unwrap();
    assert_eq!(
        head,
        format!(
            "2 of {weather_keyless} APIs matching category=Weather, auth=none (raise limit or add a keyword for the rest):"
        )
    );
    assert_eq!(text.lines().filter(|l| l.starts_with("- ")).count(), 2);
}

#[test]
fn no_match_is_a_result_that_suggests_what_to_change() {
    let text = list(entries(), &args(json!({"keyword": "zzzz-nothing"}))).unwrap();
    assert!(
        text.starts_with(
            "no APIs match keyword=\"zzzz-nothing\"; try other words or drop a filter. Categories: Animals ("
        ),
        "{text}"
    );
}

#[tokio::test]
async fn through_the_engine_no_args_lists_categories_and_an_unknown_one_is_refused() {
    let h = Harness::new();
    h.select("s", "public_api_list").await;
    let out = h
        .round(
            "s",
            "r",
            vec![
                run_tool("c1", "public_api_list", json!({})),
                run_tool("c2", "public_api_list", json!({"category": "Astrology"})),
            ],
        )
        .await;
    assert_eq!(out.results[0].status, Status::Ok);
    let counts = categories(entries());
    let mut expected = format!(
        "[public_api_list] {} categories, {} APIs. Pass category, keyword and/or auth to list APIs.",
        counts.len(),
        entries().len()
    );
    for (name, n) in &counts {
        expected.push_str(&format!("\n{name} ({n})"));
    }
    assert_eq!(out.results[0].content, expected);
    assert!(out.results[0].content.contains("\nWeather (6)"));

    assert_eq!(out.results[1].status, Status::Failed);
    let first_line = out.results[1].content.lines().next().unwrap();
    assert!(
        first_line.starts_with(
            "[public_api_list] tool=public_api_list failed: unknown category \"Astrology\"; use one of: Animals (5), Art & Museums (5), "
        ),
        "{first_line}"
    );
}

#[test]
fn spec_flags_are_concurrent_read_only_and_pure() {
    let tool = crate::Builtin::new(PublicApiList);
    let spec = tool.spec();
    assert!(spec.is_concurrent());
    assert_eq!(spec.gate, Gate::ReadOnly);
    assert_eq!(spec.effect, Effect::Pure);
}
