#!/usr/bin/env python3
"""Runs trafilatura and readability-lxml on the extraction set and writes their texts and
timings as JSON, for `tooldispatch bench extract --peers FILE` to score beside fetch_page's
extractor with the same tokeniser.

    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install trafilatura==2.3.1 && /tmp/peers/bin/pip install readability-lxml==0.9
    /tmp/peers/bin/python bench/extract/peers.py --out /tmp/peers.json
    cargo run --release -- bench extract --peers /tmp/peers.json
"""
import argparse
import gzip
import json
import time
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent


def decode(raw: bytes) -> str:
    # The pages are UTF-8 as stored; a few older ones are not, and both peers take str.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace")


def run_trafilatura(html: str, url: str) -> str:
    import trafilatura

    return trafilatura.extract(html, url=url) or ""


def run_readability(html: str, url: str) -> str:
    import lxml.html
    from readability import Document

    summary = Document(html, url=url).summary(html_partial=True)
    return lxml.html.fromstring(summary).text_content() if summary.strip() else ""


PEERS = {
    "trafilatura": ("trafilatura", run_trafilatura),
    "readability-lxml": ("readability-lxml", run_readability),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dir", type=Path, default=HERE)
    args = parser.parse_args()
    truth = json.loads((args.dir / "truth.json").read_text())
    pages = {
        key: decode(gzip.decompress((args.dir / "pages" / f"{key}.html.gz").read_bytes()))
        for key in truth
    }
    result = {}
    for name, (package, run) in PEERS.items():
        texts = {}
        spent = 0.0
        for key, html in pages.items():
            start = time.perf_counter()
            try:
                texts[key] = run(html, truth[key]["url"])
            except Exception as error:  # a peer's failure on one page scores as an empty text
                texts[key] = ""
                print(f"{name}: {key}: {error}")
            spent += time.perf_counter() - start
        result[name] = {
            "version": version(package),
            "ms_per_page": 1000 * spent / len(pages),
            "texts": texts,
        }
        print(f"{name} {version(package)}: {1000 * spent / len(pages):.1f} ms per page")
    args.out.write_text(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
