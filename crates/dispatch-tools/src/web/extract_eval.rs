//! How well fetch_page's extractor finds a page's main text: a set of real pages with their
//! main text marked by hand (`bench/extract/`), scored as bag-of-words token precision, recall
//! and F1. `tooldispatch bench extract` prints the scores and the speed; a test keeps them.
//!
//! The score is of what the model reads: the extractor's Markdown passed through the built-in
//! filter at the default result budget, without the `# title` line fetch_page puts above it
//! (the marked texts are article bodies, which leave the headline out).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::extract::{PageFormat, decode_html, extract};
use super::filter::DeterministicFilter;

/// One page of the set: its bytes as served, its address and its marked main text.
#[derive(Debug, Clone)]
pub struct EvalPage {
    /// The file stem in `pages/` (a hash of the URL).
    pub id: String,
    /// Where the page was published.
    pub url: String,
    /// The page as the server sent it.
    pub html: Vec<u8>,
    /// The main text as marked by hand.
    pub truth: String,
}

/// Precision, recall and F1 of one text against its marked main text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// Share of the returned words that belong to the main text.
    pub precision: f64,
    /// Share of the main text's words that were returned.
    pub recall: f64,
    /// Their harmonic mean.
    pub f1: f64,
}

/// Means and medians over a set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Mean precision.
    pub precision: f64,
    /// Mean recall.
    pub recall: f64,
    /// Mean F1.
    pub f1: f64,
    /// Median F1.
    pub median_f1: f64,
}

/// The set's folder in a checkout: `bench/extract` at the workspace root.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/extract")
}

/// Reads `truth.json` and every `pages/<id>.html.gz` of `dir`.
pub fn load(dir: &Path) -> Result<Vec<EvalPage>, String> {
    let truth_path = dir.join("truth.json");
    let raw = std::fs::read_to_string(&truth_path)
        .map_err(|e| format!("cannot read {}: {e}", truth_path.display()))?;
    let truth: HashMap<String, serde_json::Value> = serde_json::from_str(&raw)
        .map_err(|e| format!("{} is not the set's JSON: {e}", truth_path.display()))?;
    let mut pages = Vec::with_capacity(truth.len());
    for (id, entry) in truth {
        let path = dir.join("pages").join(format!("{id}.html.gz"));
        let gz =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut html = Vec::new();
        flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_end(&mut html)
            .map_err(|e| format!("{} is not gzip: {e}", path.display()))?;
        pages.push(EvalPage {
            url: entry["url"].as_str().unwrap_or_default().to_string(),
            truth: entry["body"].as_str().unwrap_or_default().to_string(),
            id,
            html,
        });
    }
    pages.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(pages)
}

/// What the model reads of `page` from fetch_page with default arguments, without the title
/// line: the extracted Markdown through the built-in filter at `budget` bytes. Also returns
/// the same through the filter with no budget, to tell what the budget cost.
pub fn fetch_page_text(page: &EvalPage, budget: usize) -> (String, String) {
    let html = decode_html(&page.html, None);
    let Ok(extracted) = extract(&html, &page.url, PageFormat::Markdown, false) else {
        return (String::new(), String::new());
    };
    let title_line = extracted.title.as_ref().map_or(0, |t| t.len() + 4);
    let fitted =
        DeterministicFilter.apply(&extracted.text, None, budget.saturating_sub(title_line));
    let whole = DeterministicFilter.apply(&extracted.text, None, usize::MAX);
    (fitted.text, whole.text)
}

/// Lower-cased words: runs of letters and digits; each Han or kana character is a word of
/// its own, since those scripts do not put spaces between words.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            out.push(c.to_string());
        } else if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        } else if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF // Hiragana, Katakana
        | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF // Han
    )
}

/// Bag-of-words precision, recall and F1 of `returned` against `truth`. Two empty texts agree.
pub fn score(returned: &str, truth: &str) -> Score {
    let mut want: HashMap<String, usize> = HashMap::new();
    let truth_tokens = tokens(truth);
    for t in &truth_tokens {
        *want.entry(t.clone()).or_default() += 1;
    }
    let got = tokens(returned);
    let mut hits = 0usize;
    for t in &got {
        if let Some(n) = want.get_mut(t)
            && *n > 0
        {
            *n -= 1;
            hits += 1;
        }
    }
    let ratio = |num: usize, den: usize, empty: f64| {
        if den == 0 {
            empty
        } else {
            num as f64 / den as f64
        }
    };
    let both_empty = got.is_empty() && truth_tokens.is_empty();
    let precision = ratio(hits, got.len(), if both_empty { 1.0 } else { 0.0 });
    let recall = ratio(hits, truth_tokens.len(), 1.0);
    let f1 = if precision + recall == 0.0 {
        0.0
    } else {
        2.0 * precision * recall / (precision + recall)
    };
    Score {
        precision,
        recall,
        f1,
    }
}

/// Means of each measure and the median F1.
pub fn summarize(scores: &[Score]) -> Summary {
    let n = scores.len().max(1) as f64;
    let mean = |f: fn(&Score) -> f64| scores.iter().map(f).sum::<f64>() / n;
    let mut f1s: Vec<f64> = scores.iter().map(|s| s.f1).collect();
    f1s.sort_by(f64::total_cmp);
    let median_f1 = match f1s.len() {
        0 => 0.0,
        len if len % 2 == 1 => f1s[len / 2],
        len => (f1s[len / 2 - 1] + f1s[len / 2]) / 2.0,
    };
    Summary {
        precision: mean(|s| s.precision),
        recall: mean(|s| s.recall),
        f1: mean(|s| s.f1),
        median_f1,
    }
}

#[cfg(test)]
#[path = "extract_eval_tests.rs"]
mod tests;
