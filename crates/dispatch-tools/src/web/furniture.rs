//! Page furniture inside an extracted article: what a person's eye skips although it sits in
//! the story's column. Photo galleries with their captions, credits and counters; "related" and
//! "you may also like" lists; share buttons; tag lists; comment sections and their notices;
//! author boxes; newsletter, subscription and cookie prompts; ad labels; footers.
//!
//! Readability finds the story's column; this pass removes what the column still holds, by
//! structure and repetition rather than by site: class, id and role words in many naming
//! styles, headings that introduce a list of links, paragraphs that are nothing but a link,
//! and short labels that repeat across blocks. No rule may remove most of the article: a
//! wrapper whose class happens to say "share" or "author" keeps its story.

use std::collections::HashMap;

use dom_query::{Document, NodeRef};

/// Words in a class, id, role or aria-label that mark furniture. Matched as whole words of
/// the attribute (`photo-credit`, `photoCredit`, `photo_credit` all give `credit`), or as two
/// neighbouring words run together (`read-more` → `readmore`).
const FURNITURE_WORDS: &[&str] = &[
    // galleries, captions, credits
    "caption",
    "captions",
    "figcaption",
    "credit",
    "credits",
    "gallery",
    "slideshow",
    "carousel",
    "lightbox",
    // sharing
    "share",
    "shares",
    "sharing",
    "sharebar",
    "social",
    "addthis",
    "sharethis",
    // related and recommended reading
    "related",
    "relatedposts",
    "recommended",
    "recommendations",
    "recirculation",
    "recirc",
    "popular",
    "trending",
    "mostread",
    "mostpopular",
    "morestories",
    "readmore",
    "readnext",
    "upnext",
    "outbrain",
    "taboola",
    "promo",
    // tags and categories
    "tags",
    "taglist",
    "tagcloud",
    "keywords",
    // comments
    "comment",
    "comments",
    "disqus",
    "respond",
    "replies",
    // author boxes
    "authorbio",
    "authorbox",
    "bio",
    "byline",
    // prompts
    "newsletter",
    "subscribe",
    "subscription",
    "signup",
    "paywall",
    "cookie",
    "cookies",
    "consent",
    "gdpr",
    // ads
    "ad",
    "ads",
    "advert",
    "advertisement",
    "adslot",
    "adunit",
    "sponsor",
    "sponsored",
    // page chrome
    "footer",
    "copyright",
    "breadcrumb",
    "breadcrumbs",
    "pagination",
    "toolbar",
    "sronly",
    "visuallyhidden",
    "screenreader",
    "complementary",
];

/// Headings (in the languages of the pages we read most) that introduce something other than
/// the story: what follows them, up to the next real paragraph, goes with them.
const AFTER_STORY_HEADINGS: &[&str] = &[
    "related",
    "you may also like",
    "you might also like",
    "you may like",
    "more from",
    "more stories",
    "more on this",
    "more news",
    "read more",
    "read next",
    "read also",
    "see also",
    "recommended",
    "popular",
    "most popular",
    "most read",
    "trending",
    "don't miss",
    "dont miss",
    "recent posts",
    "recent articles",
    "latest news",
    "latest stories",
    "top stories",
    "comments",
    "leave a comment",
    "leave a reply",
    "post comment",
    "about the author",
    "share this",
    "share this article",
    "sharing is caring",
    "tags",
    "more great wired stories",
    // pt, es, it, fr, de, ru, id
    "leia também",
    "leia mais",
    "veja também",
    "veja mais",
    "relacionados",
    "artigos relacionados",
    "comentários",
    "lee también",
    "noticias relacionadas",
    "artículos relacionados",
    "comentarios",
    "leggi anche",
    "articoli correlati",
    "commenti",
    "à lire aussi",
    "a lire aussi",
    "lire aussi",
    "sur le même sujet",
    "commentaires",
    "lesen sie auch",
    "mehr zum thema",
    "kommentare",
    "читайте также",
    "читайте также:",
    "похожие статьи",
    "комментарии",
    "baca juga",
    "artikel terkait",
];

/// Short lines that are labels, not text: ad markers, media notices, prompts. Compared
/// lowercase with punctuation and spacing collapsed.
const LABELS: &[&str] = &[
    "advertisement",
    "advert",
    "ad",
    "sponsored",
    "anzeige",
    "werbung",
    "publicidad",
    "publicidade",
    "pubblicità",
    "publicité",
    "iklan",
    "реклама",
    "caption",
    "image caption",
    "image copyright",
    "media caption",
    "getty",
    "getty images",
    "comments",
    "loading",
    "loading content",
    "read more",
    "continue reading",
    "show more",
    "less",
    "more",
    "trending",
    "popular",
    "subscribe",
    "tell us what you think",
    "media playback is unsupported on your device",
    "this slideshow requires javascript",
    "email the author",
    "view author archive",
    "follow us",
];

/// Elements whose text counts as blocks for the repetition and link rules.
const BLOCKS: &str = "p, li, div, span, a, button";

/// Before readability, on the whole page: remove what class, id, role or aria-label names as
/// furniture. This runs first because readability rewrites the tree as it scores it (a `div`
/// of phrasing content becomes a bare `p`), and the names are lost with the elements.
pub(crate) fn strip_named_furniture(doc: &Document) {
    let root = doc.root();
    let limit = text_len(&root) * 2 / 5;
    strip_named(&root, limit, true);
}

/// After readability, on the extracted article: galleries and captions, what is still named
/// as furniture, headed link lists, link-only paragraphs and labels.
pub(crate) fn strip_furniture(doc: &Document) {
    let root = doc.root();
    let total = text_len(&root);
    if total == 0 {
        return;
    }
    // Never take away more than this share of the article with one element.
    let limit = total * 2 / 5;

    // A figure of code, a table or a quotation is part of the text (a listing and its
    // caption); a figure of images is a gallery.
    for node in doc
        .select("figcaption, figure, aside, [role=complementary]")
        .nodes()
    {
        let figure = if node.has_name("figcaption") {
            node.parent()
        } else {
            Some(node.clone())
        };
        let holds_text = figure.is_some_and(|f| {
            f.descendants_it()
                .any(|d| d.has_name("pre") || d.has_name("table") || d.has_name("blockquote"))
        });
        if text_len(node) <= limit && !holds_text {
            node.remove_from_parent();
        }
    }
    strip_named(&root, limit, false);
    strip_headed_lists(doc, limit);
    strip_link_paragraphs(doc);
    strip_labels(doc);
}

/// Walks the tree once, removing each element named as furniture that holds at most `limit`
/// characters of text (its subtree is not visited again). Code is never furniture, whatever
/// its highlighter calls its spans ("hljs-comment"), and nothing holding the publisher's own
/// `itemprop="articleBody"` is.
fn strip_named(root: &NodeRef, limit: usize, whole_page: bool) {
    let mut stack: Vec<NodeRef> = root.children_it(true).collect();
    while let Some(node) = stack.pop() {
        if !node.is_element() || node.has_name("pre") || node.has_name("code") {
            continue;
        }
        // On the whole page the story's share is unknown: a named element holding prose is
        // left for readability to judge (a story wrapped in `class="has-comments"`).
        if is_furniture_named(&node)
            && text_len(&node) <= limit
            && !holds_article_body(&node)
            && !(whole_page && holds_prose(&node))
        {
            node.remove_from_parent();
            continue;
        }
        stack.extend(node.children_it(true));
    }
}

/// Is the element code, or inside code?
fn in_code(node: &NodeRef) -> bool {
    node.has_name("pre")
        || node.has_name("code")
        || node
            .ancestors_it(None)
            .any(|a| a.has_name("pre") || a.has_name("code"))
}

/// `itemprop="articleBody"` is the publisher saying where the story is.
fn holds_article_body(node: &NodeRef) -> bool {
    node.attr("itemprop")
        .is_some_and(|v| v.contains("articleBody"))
        || node.descendants_it().any(|d| {
            d.attr("itemprop")
                .is_some_and(|v| v.contains("articleBody"))
        })
}

/// Does the element's class, id, role or aria-label carry a furniture word?
fn is_furniture_named(node: &NodeRef) -> bool {
    if node.attr("hidden").is_some() || node.attr("aria-hidden").is_some_and(|v| &*v == "true") {
        return true;
    }
    ["class", "id", "role", "aria-label"].iter().any(|name| {
        node.attr(name).is_some_and(|value| {
            words_of(&value)
                .iter()
                .any(|w| FURNITURE_WORDS.contains(&w.as_str()))
        })
    })
}

/// The lowercase words of an attribute value, split at punctuation, spaces and camelCase
/// humps, plus each neighbouring pair run together.
fn words_of(value: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in value.chars() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    let pairs: Vec<String> = words
        .windows(2)
        .map(|p| format!("{}{}", p[0], p[1]))
        .collect();
    words.extend(pairs);
    words
}

/// A heading (or a short bold line standing as one) that says "related", "comments" and the
/// like goes, with what follows it up to the next paragraph of prose.
fn strip_headed_lists(doc: &Document, limit: usize) {
    for heading in doc
        .select("h1, h2, h3, h4, h5, h6, p, div, strong, b, span")
        .nodes()
    {
        if in_code(heading) {
            continue;
        }
        let text = label_text(&heading.text());
        if text.is_empty() || text.chars().count() > 40 {
            continue;
        }
        let introduces = AFTER_STORY_HEADINGS.iter().any(|h| {
            text == *h
                || text
                    .strip_prefix(h)
                    .is_some_and(|rest| rest.starts_with(' '))
        });
        if !introduces {
            continue;
        }
        // The heading may be wrapped (`<div><h3>Related</h3></div>`): climb while the
        // wrapper holds nothing else.
        let mut top = heading.clone();
        while let Some(parent) = top.parent() {
            if parent.is_element() && label_text(&parent.text()) == text && !parent.has_name("body")
            {
                top = parent;
            } else {
                break;
            }
        }
        let mut removed = text_len(&top);
        let mut next = top.next_element_sibling();
        while let Some(sibling) = next {
            next = sibling.next_element_sibling();
            if is_prose(&sibling) || removed + text_len(&sibling) > limit {
                break;
            }
            removed += text_len(&sibling);
            sibling.remove_from_parent();
        }
        top.remove_from_parent();
    }
}

/// Does the element hold more than one paragraph of prose?
fn holds_prose(node: &NodeRef) -> bool {
    node.descendants_it()
        .filter(|d| d.has_name("p") && d.text().split_whitespace().count() >= 15)
        .nth(1)
        .is_some()
}

/// A paragraph of the story: enough words, most of them not link text.
fn is_prose(node: &NodeRef) -> bool {
    let text = node.text();
    let words = text.split_whitespace().count();
    words >= 15 && link_density(node) < 0.5
}

/// Paragraphs and list items that are nothing but a link (promoted headlines, "Related: …"),
/// and lists whose every item is one.
fn strip_link_paragraphs(doc: &Document) {
    for node in doc.select("p, h2, h3, h4, h5, h6, ul, ol").nodes() {
        if in_code(node) {
            continue;
        }
        let text = node.text();
        let words = text.split_whitespace().count();
        if words == 0 {
            continue;
        }
        let density = link_density(node);
        let lead = label_text(&text);
        let related_lead = [
            "related",
            "read more",
            "read also",
            "see also",
            "more",
            "watch",
        ]
        .iter()
        .any(|l| lead == *l || lead.strip_prefix(l).is_some_and(|r| r.starts_with(' ')));
        if density >= 0.9 || (related_lead && density >= 0.5) {
            node.remove_from_parent();
        }
    }
}

/// Short labels that stand on their own (not words inside a sentence): the known ones, and a
/// linked or button-like label seen more than once (a share bar under every block).
fn strip_labels(doc: &Document) {
    let mut seen: HashMap<String, Vec<NodeRef>> = HashMap::new();
    for node in doc.select(BLOCKS).nodes() {
        if in_code(node) {
            continue;
        }
        let text = node.text();
        let label = label_text(&text);
        if label.is_empty() || label.split(' ').count() > 12 || !stands_alone(node) {
            continue;
        }
        if is_known_label(&label) || is_counter(&label) || is_photo_credit_or_stamp(&text, &label) {
            node.remove_from_parent();
            continue;
        }
        // A repeat counts once however deeply its text is wrapped (`<li><a>Facebook</a>`).
        let outermost = !node
            .parent()
            .is_some_and(|p| p.is_element() && label_text(&p.text()) == label);
        let has_digit = label.chars().any(|c| c.is_ascii_digit());
        if outermost && !has_digit && label.split(' ').count() <= 3 && link_density(node) >= 0.9 {
            seen.entry(label).or_default().push(node.clone());
        }
    }
    for (label, nodes) in seen {
        if nodes.len() > 1 {
            for node in nodes {
                node.remove_from_parent();
            }
        }
    }
}

/// Is the element a block of its own, with no words of a sentence beside it?
fn stands_alone(node: &NodeRef) -> bool {
    let Some(parent) = node.parent() else {
        return true;
    };
    parent
        .children_it(false)
        .all(|sibling| sibling.is_element() || !sibling.text().chars().any(char::is_alphanumeric))
}

/// A known label, or the same one-word label run together ("Advert Advert Advert"), or a share
/// bar: mostly names of social networks.
fn is_known_label(label: &str) -> bool {
    if LABELS.contains(&label) {
        return true;
    }
    let words: Vec<&str> = label.split(' ').collect();
    if words.iter().all(|w| LABELS.contains(w)) {
        return true;
    }
    let networks = words.iter().filter(|w| SOCIAL_NETWORKS.contains(w)).count();
    networks >= 2 && networks * 2 >= words.len()
}

/// Names on share buttons.
const SOCIAL_NETWORKS: &[&str] = &[
    "facebook",
    "twitter",
    "whatsapp",
    "linkedin",
    "pinterest",
    "pin",
    "pint",
    "reddit",
    "telegram",
    "tumblr",
    "flipboard",
    "messenger",
    "email",
    "mail",
    "vk",
    "ok",
    "weibo",
    "line",
    "pocket",
    "print",
    "copy",
    "link",
    "sms",
    "x",
];

/// A photo credit ("Photo: NAME, AP", "Фото: личный архив …") or a time stamp ("Updated
/// 1:39 am EST, Wednesday") standing as a line of its own.
fn is_photo_credit_or_stamp(text: &str, label: &str) -> bool {
    let raw = text.trim().to_lowercase();
    let words = label.split(' ').count();
    let credit = [
        "photo:",
        "photo by",
        "photos:",
        "foto:",
        "fotos:",
        "фото:",
        "фото ",
        "image:",
        "image source:",
        "images:",
        "credit:",
        "credits:",
        "picture:",
        "pictures:",
        "bild:",
        "imagem:",
        "(photo",
        "(image",
        "(credit",
        "photograph:",
        "illustration:",
    ];
    if words <= 10 && credit.iter().any(|c| raw.starts_with(c)) {
        return true;
    }
    let stamp = [
        "updated",
        "published",
        "posted",
        "last updated",
        "last modified",
        "atualizado",
        "publicado",
        "aktualisiert",
        "veröffentlicht",
        "mis à jour",
        "publié",
        "pubblicato",
        "aggiornato",
        "обновлено",
        "опубликовано",
    ];
    words <= 12
        && label.chars().any(|c| c.is_ascii_digit())
        && stamp
            .iter()
            .any(|s| label == *s || label.strip_prefix(s).is_some_and(|r| r.starts_with(' ')))
}

/// "Image 1 of 8", "1/8", "Foto 3 de 12": a gallery's counter.
fn is_counter(label: &str) -> bool {
    let words: Vec<&str> = label.split(' ').collect();
    let numbers = words
        .iter()
        .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
        .count();
    numbers == 2
        && words.len() <= 4
        && words
            .iter()
            .any(|w| ["of", "de", "di", "von", "из", "sur"].contains(w))
}

/// Lowercase words of a text, punctuation dropped, single spaces.
fn label_text(text: &str) -> String {
    let mut out = String::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '\'')) {
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().flat_map(char::to_lowercase));
    }
    out
}

fn text_len(node: &NodeRef) -> usize {
    node.text().chars().filter(|c| !c.is_whitespace()).count()
}

/// Share of the element's text that sits inside links.
fn link_density(node: &NodeRef) -> f64 {
    let total = text_len(node);
    if total == 0 {
        return 0.0;
    }
    let linked: usize = node
        .descendants_it()
        // Links elsewhere: a named anchor or a jump within the page (a table of contents)
        // leads nowhere else.
        .filter(|d| {
            d.has_name("a")
                && d.attr("href")
                    .is_some_and(|h| !h.trim_start().starts_with('#'))
        })
        // Nested links are not counted twice.
        .filter(|a| !a.ancestors_it(None).any(|p| p.has_name("a")))
        .map(|a| text_len(&a))
        .sum();
    linked as f64 / total as f64
}

#[cfg(test)]
#[path = "furniture_tests.rs"]
mod tests;
