use super::*;
use crate::web::extract::{PageFormat, extract};

const URL: &str = "https://news.example.com/2026/11/harbour-wall";

fn markdown(html: &str) -> String {
    extract(html, URL, PageFormat::Markdown, false)
        .unwrap()
        .text
}

const P1: &str = "The council voted on Tuesday to rebuild the harbour wall before the winter storms, \
    after engineers found that the lower courses had shifted by a hand's width since the spring.";
const P2: &str = "Work starts next month. The contractor will share the quay with the fishing fleet, \
    and boats will have more room at the inner berths while the outer wall is closed.";
const P3: &str = "The harbour master said the fleet had asked for the work for years, and that the \
    new wall would be built from the granite of the old one wherever the blocks were sound.";

/// A news article with every kind of furniture the issue names, inside the story's column.
fn furnished_article() -> String {
    format!(
        r#"<html><head><title>Harbour wall rebuilt</title></head><body>
<nav><a href="/">Home</a> <a href="/news">News</a></nav>
<article class="story">
<h1>Harbour wall to be rebuilt before winter</h1>
<div class="byline">By Ann Lee</div>
<p class="timestamp">Updated 9:30 am, Nov. 20, 2026</p>
<div class="share-bar"><a href="https://facebook.com/sharer">Facebook</a> <a href="https://twitter.com/intent">Twitter</a> <a href="mailto:?x">Email</a></div>
<p>{P1}</p>
<figure><img src="/wall.jpg" alt="The wall"><figcaption>The wall at low water. Photo: Ann Lee, AP</figcaption></figure>
<div class="gallery"><img src="/1.jpg"><span>Image 1 of 8</span><img src="/2.jpg"><span>Image 2 of 8</span></div>
<p>{P2}</p>
<p><a href="/2026/11/budget"><strong>READ MORE: COUNCIL APPROVES THE HARBOUR BUDGET</strong></a></p>
<div><a href="https://facebook.com/sharer">Facebook</a> <a href="https://twitter.com/intent">Twitter</a></div>
<p>{P3}</p>
<figure class="listing"><pre><code>let wall = Wall::rebuild(); // the comment stays</code></pre><figcaption>Listing 1: the survey's model</figcaption></figure>
<h3>You may also like</h3>
<ul><li><a href="/a">Lifeboat crew rescues two walkers</a></li><li><a href="/b">Ferry timetable changes for winter</a></li></ul>
<div class="tags"><a href="/t/harbour">harbour</a> <a href="/t/council">council</a></div>
<div id="comments"><h3>Comments</h3><p>Comments are moderated and may take up to a day to appear on this page.</p></div>
<div class="author-bio"><p>Ann Lee covers the coast and its harbours for the Gazette and has done so for ten years.</p></div>
<div class="newsletter-signup"><p>Get the harbour news in your inbox every morning, free of charge.</p></div>
<p>Advertisement</p>
</article>
<footer>© 2026 The Harbour Gazette</footer>
</body></html>"#
    )
}

#[test]
fn an_article_keeps_its_story_and_loses_its_furniture() {
    assert_eq!(
        markdown(&furnished_article()),
        format!(
            "## Harbour wall to be rebuilt before winter\n\n{P1}\n\n{P2}\n\n{P3}\n\n```\nlet wall = Wall::rebuild(); // the comment stays\n```\nListing 1: the survey's model"
        )
    );
}

#[test]
fn html_output_loses_the_same_furniture_and_every_class() {
    let page = extract(&furnished_article(), URL, PageFormat::Html, false).unwrap();
    for gone in [
        "Facebook",
        "Image 1 of 8",
        "Photo: Ann Lee",
        "You may also like",
        "moderated",
        "inbox",
        "class=",
    ] {
        assert!(!page.text.contains(gone), "{gone} in {}", page.text);
    }
    // The whole story, each paragraph as written.
    for story in [P1, P2, P3] {
        assert!(
            page.text.contains(story),
            "{story} missing from {}",
            page.text
        );
    }
}

#[test]
fn a_wrapper_named_like_furniture_keeps_the_story_it_holds() {
    // Whole-story wrappers with furniture words in their class are common ("share-container",
    // "article-with-comments"); the rule that one element may not take most of the article
    // keeps them.
    let html = format!(
        r#"<html><body><div class="post share-container comments-enabled"><h1>Wall</h1><p>{P1}</p><p>{P2}</p><p>{P3}</p></div></body></html>"#
    );
    assert_eq!(markdown(&html), format!("## Wall\n\n{P1}\n\n{P2}\n\n{P3}"));
}

#[test]
fn words_inside_sentences_are_never_labels() {
    // "more", "share", "comments" and a linked "Read more" inside prose stay where they are.
    let html = format!(
        r#"<html><body><article><p>{P1}</p><p>Readers wanted <em>more</em> and said so in the comments; <a href="/x">read more</a> about the vote, or share it.</p><p>{P3}</p></article></body></html>"#
    );
    let text = markdown(&html);
    assert!(
        text.contains("Readers wanted *more* and said so in the comments; read more about the vote, or share it."),
        "{text}"
    );
}

#[test]
fn attribute_words_split_every_naming_style() {
    for named in [
        "photo-credit",
        "photoCredit",
        "photo_credit",
        "c-read-more",
        "most_read",
        "sr-only",
        "ShareBar",
    ] {
        assert!(names_furniture(named), "{named}");
    }
    // Whole words only: no ad in a header's padding or a shadow, no tag in a stage.
    for plain in [
        "header-pad",
        "shadow",
        "story body",
        "stage",
        "ArticleBody",
        "x",
        "",
    ] {
        assert!(!names_furniture(plain), "{plain}");
    }
}

#[test]
fn counters_credits_and_stamps_are_recognised_in_several_languages() {
    for counter in ["image 1 of 8", "foto 3 de 12", "bild 2 von 5"] {
        assert!(is_counter(counter), "{counter}");
    }
    assert!(!is_counter("chapter 1 of the book 2"));
    for (text, label) in [
        ("Photo: Ann Lee, AP", "photo ann lee ap"),
        ("Фото: личный архив", "фото личный архив"),
        (
            "Updated 9:30 am, Nov. 20, 2026",
            "updated 9 30 am nov 20 2026",
        ),
    ] {
        assert!(is_photo_credit_or_stamp(text, label), "{text}");
    }
    assert!(!is_photo_credit_or_stamp(
        "Updated maps show the new wall",
        "updated maps show the new wall"
    ));
    assert!(is_known_label("advert advert advert"));
    assert!(is_known_label("whatsapp facebook pint baixar"));
    assert!(!is_known_label("the facebook post"));
}
