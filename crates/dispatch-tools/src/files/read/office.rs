//! DOCX and PPTX text: both are zip archives of XML, so zip + quick-xml read them without a
//! document model. DOCX has no pages in its XML, so it is read by lines (paragraphs); PPTX is
//! read by slides, in the order the presentation lists them. Each XML part is read through a
//! size bound, so a zip bomb stops at the bound instead of filling memory.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;

use quick_xml::Reader;
use quick_xml::events::Event;
use zip::ZipArchive;

use super::{
    Budget, DEFAULT_LINE_LIMIT, Section, Window, human_size, render_numbered, render_pages,
};

/// Largest XML part read from a DOCX or PPTX, uncompressed.
const MAX_XML_BYTES: u64 = 32 << 20;
/// Most text kept from one document or slide (the window is cut from it afterwards).
const MAX_TEXT_BYTES: usize = 16 << 20;
/// Most slides a presentation may list.
const MAX_SLIDES: usize = 10_000;

pub fn read_docx(file: File, window: Window, budget: Budget) -> Result<Section, String> {
    let mut zip = open(file, "DOCX")?;
    let xml = entry(&mut zip, "word/document.xml")?.ok_or(
        "this is not a Word document (word/document.xml is missing); it may be another zip file",
    )?;
    let text = xml_text(&xml, "word/document.xml")?;
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let limit = window.limit.unwrap_or(DEFAULT_LINE_LIMIT);
    render_numbered(&lines, window.offset, limit, "line", budget).map(|mut s| {
        s.summary = format!("DOCX, {}", s.summary);
        s
    })
}

pub fn read_pptx(file: File, window: Window, budget: Budget) -> Result<Section, String> {
    let mut zip = open(file, "PPTX")?;
    let slides = slide_parts(&mut zip)?;
    let total = slides.len() as u64;
    render_pages(total, window.offset, window.limit, "slide", budget, |n| {
        let part = &slides[(n - 1) as usize];
        match entry(&mut zip, part)? {
            Some(xml) => xml_text(&xml, part),
            None => Err(format!("{part} is missing from the archive")),
        }
    })
    .map(|mut s| {
        s.summary = format!("PPTX, {}", s.summary);
        s
    })
}

fn open(file: File, format: &str) -> Result<ZipArchive<File>, String> {
    ZipArchive::new(file).map_err(|e| format!("this {format} is not a readable zip archive: {e}"))
}

/// An archive member as text, or `None` when it is not there.
fn entry(zip: &mut ZipArchive<File>, name: &str) -> Result<Option<String>, String> {
    let member = match zip.by_name(name) {
        Ok(m) => m,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(e) => return Err(format!("cannot open {name} in the archive: {e}")),
    };
    let mut bytes = Vec::new();
    member
        .take(MAX_XML_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot unpack {name}: {e}"))?;
    if bytes.len() as u64 > MAX_XML_BYTES {
        return Err(format!(
            "{name} unpacks to more than {}; read_files stops there (convert the document to \
             text with another tool)",
            human_size(MAX_XML_BYTES)
        ));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| format!("{name} is not UTF-8 XML"))
}

/// The slide parts in presentation order (`presentation.xml` + its relationships), or by slide
/// number when the presentation does not say.
fn slide_parts(zip: &mut ZipArchive<File>) -> Result<Vec<String>, String> {
    let listed = listed_slides(zip).unwrap_or_default();
    if !listed.is_empty() {
        return Ok(listed);
    }
    let mut numbered: Vec<(u64, String)> = zip
        .file_names()
        .filter_map(|n| n.ok())
        .filter_map(|name| {
            let number = name
                .strip_prefix("ppt/slides/slide")?
                .strip_suffix(".xml")?
                .parse::<u64>()
                .ok()?;
            Some((number, name.to_string()))
        })
        .take(MAX_SLIDES)
        .collect();
    numbered.sort();
    if numbered.is_empty() && zip.by_name("ppt/presentation.xml").is_err() {
        return Err(
            "this is not a PowerPoint presentation (ppt/presentation.xml is missing)".into(),
        );
    }
    Ok(numbered.into_iter().map(|(_, name)| name).collect())
}

fn listed_slides(zip: &mut ZipArchive<File>) -> Result<Vec<String>, String> {
    let Some(rels) = entry(zip, "ppt/_rels/presentation.xml.rels")? else {
        return Ok(Vec::new());
    };
    let mut targets: HashMap<String, String> = HashMap::new();
    let mut reader = Reader::from_str(&rels);
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) if e.local_name().as_ref() == "Relationship" => {
                let get = |key: &str| {
                    e.try_get_attribute(key)
                        .ok()
                        .flatten()
                        .map(|a| a.value.into_owned())
                };
                if let (Some(id), Some(target)) = (get("Id"), get("Target")) {
                    targets.insert(id, target);
                }
            }
            Ok(Event::Eof) => break,
            Err(e) => return Err(e.to_string()),
            _ => {}
        }
    }
    let Some(presentation) = entry(zip, "ppt/presentation.xml")? else {
        return Ok(Vec::new());
    };
    let mut parts = Vec::new();
    let mut reader = Reader::from_str(&presentation);
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) if e.local_name().as_ref() == "sldId" => {
                let rid = e
                    .attributes()
                    .with_checks(false)
                    .filter_map(Result::ok)
                    .find(|a| a.key.local_name().as_ref() == "id" && a.key.as_ref() != "id")
                    .map(|a| a.value.into_owned());
                if let Some(target) = rid.and_then(|r| targets.get(&r)) {
                    let target = target.trim_start_matches('/');
                    let part = match target.strip_prefix("ppt/") {
                        Some(_) => target.to_string(),
                        None => format!("ppt/{target}"),
                    };
                    parts.push(part);
                    if parts.len() >= MAX_SLIDES {
                        break;
                    }
                }
            }
            Ok(Event::Eof) => break,
            Err(e) => return Err(e.to_string()),
            _ => {}
        }
    }
    Ok(parts)
}

/// The text of a WordprocessingML or DrawingML part: runs joined, one line per paragraph,
/// table cells separated by ` | `.
fn xml_text(xml: &str, part: &str) -> Result<String, String> {
    let mut reader = Reader::from_str(xml);
    let mut out = String::new();
    let mut in_text = false;
    let mut tables = 0usize;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| format!("{part} is malformed XML: {e}"))?;
        match event {
            Event::Start(e) => match e.local_name().as_ref() {
                "t" => in_text = true,
                "tbl" => tables += 1,
                _ => {}
            },
            Event::Empty(e) => match e.local_name().as_ref() {
                "tab" => out.push('\t'),
                "br" | "cr" => out.push('\n'),
                _ => {}
            },
            Event::End(e) => match e.local_name().as_ref() {
                "t" => in_text = false,
                "p" => out.push(if tables > 0 { ' ' } else { '\n' }),
                "tc" => out.push_str("| "),
                "tr" => out.push('\n'),
                "tbl" => tables = tables.saturating_sub(1),
                _ => {}
            },
            Event::Text(t) if in_text => out.push_str(&t.xml10_content()),
            Event::CData(t) if in_text => out.push_str(&t),
            Event::GeneralRef(r) if in_text => {
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    out.push(c);
                } else if let Some(s) = quick_xml::escape::resolve_predefined_entity(&r) {
                    out.push_str(s);
                }
            }
            Event::Eof => break,
            _ => {}
        }
        if out.len() > MAX_TEXT_BYTES {
            out.push_str("\n[… the text stops here: over 16 MiB]\n");
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_paragraphs_tabs_and_tables_become_lines() {
        let xml = r#"<w:document xmlns:w="x"><w:body>
            <w:p><w:r><w:t>Hello</w:t></w:r><w:r><w:tab/><w:t xml:space="preserve"> world &amp; co</w:t></w:r></w:p>
            <w:p><w:r><w:instrText>PAGE</w:instrText><w:t>second</w:t><w:br/><w:t>line&#33;</w:t></w:r></w:p>
            <w:tbl><w:tr><w:tc><w:p><w:r><w:t>a</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>b</w:t></w:r></w:p></w:tc></w:tr></w:tbl>
            </w:body></w:document>"#;
        let text = xml_text(xml, "word/document.xml").unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec!["Hello\t world & co", "second", "line!", "a | b | "]
        );
    }

    #[test]
    fn malformed_xml_names_the_part() {
        let err = xml_text("<a><b></a>", "ppt/slides/slide1.xml").unwrap_err();
        assert!(
            err.starts_with("ppt/slides/slide1.xml is malformed XML"),
            "{err}"
        );
    }
}
