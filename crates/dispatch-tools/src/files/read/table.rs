//! CSV and TSV by rows: a quoted field may span lines, so rows are counted by a real CSV
//! parser, not by newlines. The header row is always shown so a window from the middle of a
//! big table still says what its columns are, on every page of it. Streamed like text, and
//! paged like it: a window stops at a row boundary within its budget.

use std::io::Read;

use super::{
    Budget, COUNT_AHEAD_BYTES, CUT_NOTE_RESERVE, MAX_LINE_BYTES, Section, human_size, past_end,
    thousands,
};

/// Read data rows `offset..offset+limit` (1-based, header excluded) of a table of `size` bytes,
/// within `budget`.
pub fn read_table<R: Read>(
    reader: R,
    delimiter: u8,
    offset: u64,
    limit: u64,
    size: u64,
    budget: Budget,
) -> Result<Section, String> {
    let offset = offset.max(1);
    let end = offset.saturating_add(limit.max(1));
    let mut rdr = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(false)
        .flexible(true)
        .from_reader(reader);
    let mut record = csv::ByteRecord::new();
    let mut lossy = false;
    let read = |rdr: &mut csv::Reader<R>, record: &mut csv::ByteRecord| {
        rdr.read_byte_record(record)
            .map_err(|e| format!("cannot parse it as {}: {e}", name(delimiter)))
    };
    if !read(&mut rdr, &mut record)? {
        return Ok(Section {
            summary: "empty table".into(),
            body: "(empty file)\n".into(),
            image: None,
        });
    }
    let mut content = budget.content();
    // The header may take at most half the budget, so rows always have room.
    let header_cap = MAX_LINE_BYTES.min(content.saturating_sub(CUT_NOTE_RESERVE) / 2);
    let mut body = format!(
        "{:>6}\t{}\n",
        "header",
        render(&record, delimiter, &mut lossy, header_cap)
    );
    let mut rows: u64 = 0;
    let mut first = None;
    let mut last = 0;
    let mut stopped_by_bytes = false;
    let mut exact = true;
    let mut window_end_byte = None;
    while read(&mut rdr, &mut record)? {
        rows += 1;
        if rows < offset {
            continue;
        }
        if rows < end && !stopped_by_bytes {
            let row = |lossy: &mut bool, cap| {
                format!("{rows:>6}\t{}\n", render(&record, delimiter, lossy, cap))
            };
            // Only a row that is shown may mark the read as lossy.
            let mut row_lossy = false;
            let mut line = row(&mut row_lossy, MAX_LINE_BYTES);
            if body.len() + line.len() > content {
                if first.is_some() {
                    stopped_by_bytes = true;
                } else {
                    // The window's first row alone is over the budget: show what fits of it.
                    let gutter = super::text::gutter_width(rows);
                    let room = content.saturating_sub(body.len() + gutter + CUT_NOTE_RESERVE);
                    line = row(&mut row_lossy, room);
                    // Cut to fit: this read ends with it.
                    content = body.len() + line.len();
                }
            }
            if !stopped_by_bytes {
                lossy |= row_lossy;
                body.push_str(&line);
                first.get_or_insert(rows);
                last = rows;
                continue;
            }
        }
        // Past the window: keep counting rows for a while to give the total.
        let at = rdr.position().byte();
        let start = *window_end_byte.get_or_insert(at);
        if at.saturating_sub(start) > COUNT_AHEAD_BYTES {
            exact = false;
            break;
        }
    }
    let Some(first) = first else {
        if rows == 0 {
            return Ok(Section {
                summary: "header only, no rows".into(),
                body,
                image: None,
            });
        }
        return Err(past_end(offset, rows, "row"));
    };
    let of = if exact {
        rows.to_string()
    } else {
        format!("at least {rows}")
    };
    let mut summary = format!(
        "{}, rows {first}-{last} of {of} (header kept)",
        name(delimiter)
    );
    if lossy {
        summary.push_str("; not valid UTF-8: undecodable bytes shown as U+FFFD");
    }
    if last < rows {
        let why = if stopped_by_bytes {
            budget.why()
        } else {
            "the limit".to_string()
        };
        let rest = if exact {
            format!("rows {}-{rows} not shown", last + 1)
        } else {
            format!("more rows follow (the file is {})", human_size(size))
        };
        summary.push_str("; more follows");
        body.push_str(&format!(
            "[truncated by {why}: {rest}; continue with offset={}]\n",
            last + 1
        ));
    }
    Ok(Section {
        summary,
        body,
        image: None,
    })
}

fn name(delimiter: u8) -> &'static str {
    if delimiter == b'\t' { "TSV" } else { "CSV" }
}

/// One record written back in its own dialect (quoting kept where needed), cut at `cap` bytes.
fn render(record: &csv::ByteRecord, delimiter: u8, lossy: &mut bool, cap: usize) -> String {
    let mut writer = csv::WriterBuilder::new()
        .delimiter(delimiter)
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    let bytes = match writer.write_byte_record(record) {
        Ok(()) => writer.into_inner().unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let mut bytes = bytes.strip_suffix(b"\n").unwrap_or(&bytes).to_vec();
    let full = bytes.len();
    if full > cap {
        bytes.truncate(cap);
    }
    let mut text = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            let bytes = e.into_bytes();
            let valid = std::str::from_utf8(&bytes)
                .err()
                .map(|e| (e.valid_up_to(), e.error_len()));
            // A cut through the last character is not an encoding problem.
            match valid {
                Some((upto, None)) if full > cap => {
                    String::from_utf8_lossy(&bytes[..upto]).into_owned()
                }
                _ => {
                    *lossy = true;
                    String::from_utf8_lossy(&bytes).into_owned()
                }
            }
        }
    };
    if full > cap {
        text.push_str(&format!(
            " [… row cut: {} more bytes]",
            thousands((full - text.len()) as u64)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn rows_are_numbered_after_the_header_and_quotes_survive() {
        let csv = "id,name\n1,alice\n2,\"bob, jr\"\n3,\"multi\nline\"\n4,dan\n";
        let s = read_table(csv.as_bytes(), b',', 2, 2, csv.len() as u64, Budget::CAP).unwrap();
        assert_eq!(s.summary, "CSV, rows 2-3 of 4 (header kept); more follows");
        assert_eq!(
            s.body,
            "header\tid,name\n     2\t2,\"bob, jr\"\n     3\t3,\"multi\nline\"\n\
             [truncated by the limit: rows 4-4 not shown; continue with offset=4]\n"
        );
    }

    #[test]
    fn tsv_header_only_and_past_the_end() {
        let tsv = "a\tb\n";
        assert_eq!(
            read_table(tsv.as_bytes(), b'\t', 1, 10, 4, Budget::CAP)
                .unwrap()
                .summary,
            "header only, no rows"
        );
        let tsv = "a\tb\n1\t2\n";
        let s = read_table(tsv.as_bytes(), b'\t', 1, 10, 8, Budget::CAP).unwrap();
        assert_eq!(s.body, "header\ta\tb\n     1\t1\t2\n");
        assert_eq!(
            read_table(tsv.as_bytes(), b'\t', 5, 10, 8, Budget::CAP).unwrap_err(),
            "offset 5 is past the end: there is 1 row; use an offset from 1 to 1"
        );
    }

    #[test]
    fn pages_of_rows_repeat_the_header_and_cut_a_huge_first_row() {
        let budget = Budget {
            bytes: 1200,
            bound: super::super::Bound::Share,
        };
        let csv: String = std::iter::once("id,name\n".to_string())
            .chain((1..=500).map(|i| format!("{i},\"n, {i}\"\n")))
            .collect();
        let mut offset = 1;
        let mut seen = Vec::new();
        loop {
            let s = read_table(csv.as_bytes(), b',', offset, 2000, 0, budget).unwrap();
            assert!(s.body.len() <= 1200, "{}", s.body.len());
            assert!(s.body.starts_with("header\tid,name\n"), "{}", s.body);
            for l in s.body.lines().skip(1).filter(|l| !l.starts_with('[')) {
                let (n, row) = l.trim_start().split_once('\t').unwrap();
                assert_eq!(row, format!("{n},\"n, {n}\""));
                seen.push(n.parse::<u32>().unwrap());
            }
            match s.body.rsplit_once("continue with offset=") {
                Some((_, next)) => offset = next.trim_end_matches("]\n").parse().unwrap(),
                None => break,
            }
        }
        assert_eq!(seen, (1..=500).collect::<Vec<_>>());

        let csv = format!("a,b\n1,{}\n2,x\n", "z".repeat(5000));
        let s = read_table(csv.as_bytes(), b',', 1, 10, 0, budget).unwrap();
        assert!(s.body.len() <= 1200, "{}", s.body.len());
        assert!(s.body.contains(" [… row cut: "), "{}", s.body);
        assert!(s.body.ends_with("continue with offset=2]\n"), "{}", s.body);
    }
}
