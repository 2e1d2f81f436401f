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
use std::hash::{BuildHasherDefault, Hasher};

use dom_query::{Document, NodeData, NodeId, NodeRef, local_name};

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
/// Characters (not counting spaces) beyond which an element is no label or heading: its text
/// is not even read.
const LABEL_MAX_CHARS: usize = 160;

/// Before readability, on the whole page: remove what class, id, role or aria-label names as
/// furniture. This runs first because readability rewrites the tree as it scores it (a `div`
/// of phrasing content becomes a bare `p`), and the names are lost with the elements.
pub(crate) fn strip_named_furniture(doc: &Document) {
    let root = doc.root();
    let measures = Measures::of(&root);
    let limit = measures.get(&root).text * 2 / 5;
    strip_named(&root, &measures, limit, true);
}

/// After readability, on the extracted article: galleries and captions, what is still named
/// as furniture, headed link lists, link-only paragraphs and labels.
pub(crate) fn strip_furniture(doc: &Document) {
    let root = doc.root();
    let measures = Measures::of(&root);
    let total = measures.get(&root).text;
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
            Some(*node)
        };
        let holds_text = figure.is_some_and(|f| measures.get(&f).holds_text);
        if measures.get(node).text <= limit && !holds_text {
            node.remove_from_parent();
        }
    }
    strip_named(&root, &measures, limit, false);
    // The rules below read lengths and link shares of the tree as it now is.
    let measures = Measures::of(&root);
    strip_headed_lists(doc, &measures, limit);
    strip_link_paragraphs(doc, &measures);
    strip_labels(doc, &measures);
}

/// What the rules need to know of an element's subtree, measured for every node in one pass,
/// so no rule walks a subtree per element (a hostile page nests hundreds of levels deep).
#[derive(Debug, Default, Clone, Copy)]
struct Measure {
    /// Characters of text, spaces not counted.
    text: usize,
    /// Of those, characters inside links to somewhere else.
    linked: usize,
    /// Words of text (counted per text node).
    words: usize,
    /// Paragraphs of fifteen words or more.
    prose: usize,
    /// Holds `itemprop="articleBody"`: the publisher saying where the story is.
    article_body: bool,
    /// Holds code, a table or a quotation.
    holds_text: bool,
    /// Has a text child with a letter or digit: its element children sit inside a sentence.
    own_words: bool,
    /// Is code or inside code.
    in_code: bool,
}

struct Measures(HashMap<NodeId, Measure, BuildHasherDefault<IdHasher>>);

/// What one node is, read from the tree once.
#[derive(Clone, Copy)]
enum Own {
    Text {
        chars: usize,
        words: usize,
        alnum: bool,
    },
    Element {
        code: bool,
        link: bool,
        paragraph: bool,
        holds_text: bool,
        article_body: bool,
    },
    Other,
}

impl Own {
    fn of(node: &NodeRef) -> Own {
        node.query(|n| match &n.data {
            NodeData::Text { contents } => {
                // One pass over the text: it is most of what the page holds.
                let (mut chars, mut words, mut alnum, mut in_word) = (0, 0, false, false);
                for c in contents.chars() {
                    if c.is_whitespace() {
                        in_word = false;
                        continue;
                    }
                    chars += 1;
                    words += usize::from(!in_word);
                    in_word = true;
                    alnum = alnum || c.is_alphanumeric();
                }
                Own::Text {
                    chars,
                    words,
                    alnum,
                }
            }
            NodeData::Element(el) => {
                let name = &el.name.local;
                Own::Element {
                    code: *name == local_name!("pre") || *name == local_name!("code"),
                    // Links elsewhere: a named anchor or a jump within the page (a table of
                    // contents) leads nowhere else.
                    link: *name == local_name!("a")
                        && el
                            .attr_ref(local_name!("href"))
                            .is_some_and(|h| !h.trim_start().starts_with('#')),
                    paragraph: *name == local_name!("p"),
                    holds_text: *name == local_name!("pre")
                        || *name == local_name!("table")
                        || *name == local_name!("blockquote"),
                    article_body: el
                        .attr_ref(local_name!("itemprop"))
                        .is_some_and(|v| v.contains("articleBody")),
                }
            }
            _ => Own::Other,
        })
        .unwrap_or(Own::Other)
    }
}

impl Measures {
    fn of(root: &NodeRef) -> Self {
        let mut map: HashMap<NodeId, Measure, BuildHasherDefault<IdHasher>> = HashMap::default();
        // Post-order, with an explicit stack: children are measured before their parent.
        // A node is read from the tree on its first visit and summed up on its second.
        let mut stack: Vec<(NodeRef, Option<Own>, bool)> = vec![(*root, None, false)];
        while let Some((node, own, in_code)) = stack.pop() {
            let Some(own) = own else {
                let own = Own::of(&node);
                let in_code = in_code || matches!(own, Own::Element { code: true, .. });
                stack.push((node, Some(own), in_code));
                stack.extend(node.children_it(false).map(|c| (c, None, in_code)));
                continue;
            };
            let mut m = Measure {
                in_code,
                ..Measure::default()
            };
            match own {
                Own::Text {
                    chars,
                    words,
                    alnum,
                } => {
                    m.text = chars;
                    m.words = words;
                    m.own_words = alnum;
                }
                Own::Element { .. } | Own::Other => {
                    for child in node.children_it(false) {
                        let c = map.get(&child.id).copied().unwrap_or_default();
                        m.text += c.text;
                        m.linked += c.linked;
                        m.words += c.words;
                        m.prose += c.prose;
                        m.article_body |= c.article_body;
                        m.holds_text |= c.holds_text;
                        m.own_words |= child.is_text() && c.own_words;
                    }
                }
            }
            if let Own::Element {
                link,
                paragraph,
                holds_text,
                article_body,
                ..
            } = own
            {
                if link {
                    m.linked = m.text;
                }
                if paragraph && m.words >= 15 {
                    m.prose += 1;
                }
                m.article_body |= article_body;
                m.holds_text |= holds_text;
            }
            map.insert(node.id, m);
        }
        Measures(map)
    }

    fn get(&self, node: &NodeRef) -> Measure {
        self.0.get(&node.id).copied().unwrap_or_default()
    }

    /// Share of the element's text that sits inside links elsewhere.
    fn link_density(&self, node: &NodeRef) -> f64 {
        let m = self.get(node);
        if m.text == 0 {
            0.0
        } else {
            m.linked as f64 / m.text as f64
        }
    }
}

/// NodeIds are small distinct integers: one multiplication spreads them well enough.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Walks the tree once, removing each element named as furniture that holds at most `limit`
/// characters of text (its subtree is not visited again). Code is never furniture, whatever
/// its highlighter calls its spans ("hljs-comment"), and nothing holding the publisher's own
/// `itemprop="articleBody"` is.
fn strip_named(root: &NodeRef, measures: &Measures, limit: usize, whole_page: bool) {
    let mut stack: Vec<NodeRef> = root.children_it(true).collect();
    while let Some(node) = stack.pop() {
        if !node.is_element() || node.has_name("pre") || node.has_name("code") {
            continue;
        }
        let m = measures.get(&node);
        // On the whole page the story's share is unknown: a named element holding prose is
        // left for readability to judge (a story wrapped in `class="has-comments"`).
        if m.text <= limit
            && !m.article_body
            && !(whole_page && m.prose > 1)
            && is_furniture_named(&node)
        {
            node.remove_from_parent();
            continue;
        }
        stack.extend(node.children_it(true));
    }
}

/// Does the element's class, id, role or aria-label carry a furniture word?
fn is_furniture_named(node: &NodeRef) -> bool {
    node.query(|n| {
        let NodeData::Element(el) = &n.data else {
            return false;
        };
        // Read in place: no attribute is copied out of the tree.
        el.attrs.iter().any(|attr| {
            let name = &attr.name.local;
            if *name == local_name!("hidden") {
                true
            } else if *name == local_name!("aria-hidden") {
                &*attr.value == "true"
            } else if *name == local_name!("class")
                || *name == local_name!("id")
                || *name == local_name!("role")
                || *name == local_name!("aria-label")
            {
                names_furniture(&attr.value)
            } else {
                false
            }
        })
    })
    .unwrap_or(false)
}

/// Does an attribute value hold a furniture word? Words split at punctuation, spaces and
/// camelCase humps (`photo-credit`, `photoCredit`, `photo_credit` all give `credit`), and two
/// neighbouring words run together count too (`read-more` → `readmore`). Nothing is
/// collected: this runs on every named element of the page.
fn names_furniture(value: &str) -> bool {
    let mut word = String::new();
    let mut previous = String::new();
    let mut pair = String::new();
    let mut check = |word: &mut String, previous: &mut String| {
        if word.is_empty() {
            return false;
        }
        pair.clear();
        pair.push_str(previous);
        pair.push_str(word);
        let hit = FURNITURE_WORDS.contains(&word.as_str())
            || (!previous.is_empty() && FURNITURE_WORDS.contains(&pair.as_str()));
        std::mem::swap(previous, word);
        word.clear();
        hit
    };
    let mut prev_lower = false;
    for c in value.chars() {
        if !c.is_alphanumeric() {
            if check(&mut word, &mut previous) {
                return true;
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && check(&mut word, &mut previous) {
            return true;
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    check(&mut word, &mut previous)
}

/// A heading (or a short bold line standing as one) that says "related", "comments" and the
/// like goes, with what follows it up to the next paragraph of prose.
fn strip_headed_lists(doc: &Document, measures: &Measures, limit: usize) {
    for heading in doc
        .select("h1, h2, h3, h4, h5, h6, p, div, strong, b, span")
        .nodes()
    {
        let m = measures.get(heading);
        if m.in_code || m.text == 0 || m.text > LABEL_MAX_CHARS {
            continue;
        }
        let text = label_text(&heading.text());
        if text.chars().count() > 40 {
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
        let mut top = *heading;
        while let Some(parent) = top.parent() {
            if parent.is_element()
                && !parent.has_name("body")
                && measures.get(&parent).text == measures.get(&top).text
            {
                top = parent;
            } else {
                break;
            }
        }
        let mut removed = measures.get(&top).text;
        let mut next = top.next_element_sibling();
        while let Some(sibling) = next {
            next = sibling.next_element_sibling();
            let s = measures.get(&sibling);
            let prose = s.words >= 15 && measures.link_density(&sibling) < 0.5;
            if prose || removed + s.text > limit {
                break;
            }
            removed += s.text;
            sibling.remove_from_parent();
        }
        top.remove_from_parent();
    }
}

/// Paragraphs and lists that are nothing but links (promoted headlines, "Related: …").
fn strip_link_paragraphs(doc: &Document, measures: &Measures) {
    for node in doc.select("p, h2, h3, h4, h5, h6, ul, ol").nodes() {
        let m = measures.get(node);
        if m.in_code || m.words == 0 {
            continue;
        }
        let density = measures.link_density(node);
        if density >= 0.9 {
            node.remove_from_parent();
            continue;
        }
        if density < 0.5 || m.text > LABEL_MAX_CHARS * 2 {
            continue;
        }
        let lead = label_text(&node.text());
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
        if related_lead {
            node.remove_from_parent();
        }
    }
}

/// Short labels that stand on their own (not words inside a sentence): the known ones, and a
/// linked or button-like label seen more than once (a share bar under every block).
fn strip_labels(doc: &Document, measures: &Measures) {
    let mut seen: HashMap<String, Vec<NodeRef>> = HashMap::new();
    for node in doc.select(BLOCKS).nodes() {
        let m = measures.get(node);
        if m.in_code || m.text == 0 || m.text > LABEL_MAX_CHARS {
            continue;
        }
        // Words inside a sentence are never a label.
        if node.parent().is_some_and(|p| measures.get(&p).own_words) {
            continue;
        }
        let text = node.text();
        let label = label_text(&text);
        if label.is_empty() || label.split(' ').count() > 12 {
            continue;
        }
        if is_known_label(&label) || is_counter(&label) || is_photo_credit_or_stamp(&text, &label) {
            node.remove_from_parent();
            continue;
        }
        // A repeat counts once however deeply its text is wrapped (`<li><a>Facebook</a>`).
        let outermost = !node
            .parent()
            .is_some_and(|p| p.is_element() && measures.get(&p).text == m.text);
        let has_digit = label.chars().any(|c| c.is_ascii_digit());
        // A bare link repeated is a cross-reference (`<string>` after every parameter); a
        // block of nothing but one is a button.
        if outermost
            && !node.has_name("a")
            && !has_digit
            && label.split(' ').count() <= 3
            && measures.link_density(node) >= 0.9
        {
            seen.entry(label).or_default().push(*node);
        }
    }
    for nodes in seen.into_values() {
        if nodes.len() > 1 {
            for node in nodes {
                node.remove_from_parent();
            }
        }
    }
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

#[cfg(test)]
#[path = "furniture_tests.rs"]
mod tests;
