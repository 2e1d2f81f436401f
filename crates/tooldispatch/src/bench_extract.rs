//! `tooldispatch bench extract`: fetch_page's extractor on the marked page set
//! (`bench/extract`): precision, recall and F1 against each page's hand-marked main text, the
//! worst pages, what the result budget cost, and the extraction time per page. With
//! `--peers FILE` (written by `bench/extract/peers.py`) other extractors' texts are scored
//! beside it by the same tokeniser.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use dispatch_engine::shaping::DEFAULT_RESULT_BUDGET;
use dispatch_tools::web::extract::{PageFormat, decode_html, extract};
use dispatch_tools::web::extract_eval::{
    EvalPage, Score, default_dir, fetch_page_text, load, score, summarize,
};
use serde_json::Value;

use crate::CliError;

#[derive(Args)]
pub struct ExtractArgs {
    /// extract: the page set's folder (default: bench/extract of this checkout).
    #[arg(long, value_name = "DIR")]
    pages: Option<PathBuf>,
    /// extract: other extractors' texts to score beside ours, as written by
    /// bench/extract/peers.py.
    #[arg(long, value_name = "FILE")]
    peers: Option<PathBuf>,
    /// extract: how many of the lowest-scoring pages to list.
    #[arg(long, default_value_t = 10)]
    worst: usize,
}

/// One extractor's row of the table.
struct Row {
    name: String,
    version: String,
    scores: Vec<Score>,
    ms_per_page: f64,
}

pub fn run(args: ExtractArgs, reps: usize) -> Result<(), CliError> {
    let dir = args.pages.clone().unwrap_or_else(|| {
        let here = Path::new("bench/extract");
        if here.join("truth.json").exists() {
            here.to_path_buf()
        } else {
            default_dir()
        }
    });
    let pages = load(&dir).map_err(|e| {
        CliError::failed(format!(
            "{e}; run from the repository's root or pass --pages DIR"
        ))
    })?;
    if pages.is_empty() {
        return Err(CliError::failed(format!(
            "{} holds no pages",
            dir.display()
        )));
    }

    let mut ours = Vec::with_capacity(pages.len());
    let mut budget_cut = Vec::new();
    for page in &pages {
        let (returned, whole) = fetch_page_text(page, DEFAULT_RESULT_BUDGET);
        let s = score(&returned, &page.truth);
        if returned != whole {
            let before = score(&whole, &page.truth);
            budget_cut.push((page, before.recall, s.recall));
        }
        ours.push(s);
    }
    let mut rows = vec![Row {
        name: "tooldispatch fetch_page".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        scores: ours.clone(),
        ms_per_page: time_per_page(&pages, reps.max(1)),
    }];
    if let Some(path) = &args.peers {
        rows.extend(peer_rows(path, &pages)?);
    }

    let mut out = String::new();
    out.push_str(&format!(
        "{} pages from {}; bag-of-words token scores against the marked main text\n\n",
        pages.len(),
        dir.display()
    ));
    out.push_str(&format!(
        "{:<26} {:<9} {:>7} {:>7} {:>8} {:>10} {:>9} {:>8}\n",
        "extractor", "version", "mean P", "mean R", "mean F1", "median F1", "ms/page", "pages/s"
    ));
    for row in &rows {
        let s = summarize(&row.scores);
        out.push_str(&format!(
            "{:<26} {:<9} {:>7.3} {:>7.3} {:>8.3} {:>10.3} {:>9.2} {:>8.0}\n",
            row.name,
            row.version,
            s.precision,
            s.recall,
            s.f1,
            s.median_f1,
            row.ms_per_page,
            1000.0 / row.ms_per_page
        ));
    }
    for row in rows.iter().skip(1) {
        out.push_str(&format!(
            "{} takes {:.1}× fetch_page's extraction time per page\n",
            row.name,
            row.ms_per_page / rows[0].ms_per_page
        ));
    }

    let mut worst: Vec<(usize, &Score)> = ours.iter().enumerate().collect();
    worst.sort_by(|a, b| a.1.f1.total_cmp(&b.1.f1));
    out.push_str("\nlowest F1 (fetch_page):\n");
    for (i, s) in worst.into_iter().take(args.worst) {
        out.push_str(&format!(
            "  F1 {:.3}  P {:.3}  R {:.3}  {}  {}\n",
            s.f1, s.precision, s.recall, pages[i].id, pages[i].url
        ));
    }
    out.push_str(&format!(
        "\ncut by the {DEFAULT_RESULT_BUDGET}-byte result budget: {} pages\n",
        budget_cut.len()
    ));
    for (page, before, after) in budget_cut {
        let fits = page.truth.len() < DEFAULT_RESULT_BUDGET;
        out.push_str(&format!(
            "  recall {before:.3} → {after:.3}  main text {} bytes{}  {}\n",
            page.truth.len(),
            if fits { " (fits)" } else { "" },
            page.url
        ));
    }
    crate::print_line(out.trim_end());
    Ok(())
}

/// Milliseconds per page of decoding and extraction alone (no filter), the best of `reps`
/// passes over the set, so a busy moment on the machine does not count.
fn time_per_page(pages: &[EvalPage], reps: usize) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let start = Instant::now();
        for page in pages {
            let html = decode_html(&page.html, None);
            let _ = std::hint::black_box(extract(&html, &page.url, PageFormat::Markdown, false));
        }
        best = best.min(start.elapsed().as_secs_f64() * 1000.0 / pages.len() as f64);
    }
    best
}

fn peer_rows(path: &Path, pages: &[EvalPage]) -> Result<Vec<Row>, CliError> {
    let raw = std::fs::read_to_string(path)
        .map_err(|e| CliError::failed(format!("cannot read {}: {e}", path.display())))?;
    let peers: serde_json::Map<String, Value> = serde_json::from_str(&raw).map_err(|e| {
        CliError::failed(format!(
            "{} is not the JSON bench/extract/peers.py writes: {e}",
            path.display()
        ))
    })?;
    let mut rows = Vec::new();
    for (name, peer) in peers {
        let texts = &peer["texts"];
        let scores = pages
            .iter()
            .map(|p| score(texts[&p.id].as_str().unwrap_or_default(), &p.truth))
            .collect();
        rows.push(Row {
            name,
            version: peer["version"].as_str().unwrap_or("?").to_string(),
            scores,
            ms_per_page: peer["ms_per_page"].as_f64().unwrap_or(f64::NAN),
        });
    }
    Ok(rows)
}
