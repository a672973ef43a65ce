#!/usr/bin/env python3
"""Offline link check of the documentation (run by `scripts/docs.sh --check`).

1. The built site (target/book), its HTML as a browser reads it: every relative href of every
   page must name a page or file of the site, and its #fragment an id on that page. A link
   that leaves the site (to a file of the repository outside docs/) is broken there, even when
   the file exists in the repository: the README it is in is made a page of the site
   (tests/docs_site.rs copies the chart's and the manifests' READMEs), the file is included in
   a page, or the link is an absolute URL.
2. The Markdown files outside the site (README.md and the other READMEs, CHANGELOG.md): every
   relative link must name an existing file, and its #fragment a heading of the target.

External links (http:, https:, mailto:) are not fetched. Exit status 1 lists every broken link.
"""

import html.parser
import os
import re
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "docs"  # the book's source directory (book.toml `src`)
# Markdown files outside the book, checked as GitHub renders them.
MARKDOWN_GLOBS = [
    "README.md",
    "CHANGELOG.md",
    "charts/*/README.md",
    "manifests/README.md",
    "certs/README.md",
    "examples/**/README.md",
    "bench/**/README.md",
]
# Pages mdBook writes besides the book's own (they repeat every page).
SKIP_PAGES = {"print.html", "404.html", "toc.html"}


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag in ("a", "link") and attrs.get("href"):
            self.hrefs.append(attrs["href"])
        if tag in ("img", "script") and attrs.get("src"):
            self.hrefs.append(attrs["src"])


_pages = {}


def parse_page(path):
    if path not in _pages:
        page = Page()
        page.feed(path.read_text(encoding="utf-8"))
        _pages[path] = page
    return _pages[path]


def strip_code(text):
    """Markdown without fenced code blocks and inline code (links there are not links)."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading):
    """GitHub's (and mdBook's) anchor of a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # link text only
    text = text.replace("`", "").strip().lower()
    out = []
    for ch in text:
        if ch in " -":
            out.append("-")
        elif ch == "_" or ch.isalnum() or unicodedata.category(ch).startswith("L"):
            out.append(ch)
    return "".join(out)


_anchors = {}


def markdown_anchors(path):
    if path not in _anchors:
        seen = {}
        anchors = set()
        text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
        for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            anchors.add(base if n == 0 else f"{base}-{n}")
        for m in re.finditer(r"""<a\s+(?:name|id)=["']([^"']+)["']""", text):
            anchors.add(m.group(1))
        _anchors[path] = anchors
    return _anchors[path]


def check_repo_target(target, fragment, where, errors):
    """A link to a file of the repository (outside the site)."""
    if not target.exists():
        errors.append(f"{where}: {os.path.relpath(target, ROOT)} does not exist")
        return
    if fragment and target.suffix == ".md":
        if fragment not in markdown_anchors(target):
            errors.append(f"{where}: no heading #{fragment} in {target.relative_to(ROOT)}")


def check_book(book, errors):
    book = book.resolve()
    pages = sorted(p for p in book.rglob("*.html") if p.relative_to(book).as_posix() not in SKIP_PAGES)
    if not pages:
        errors.append(f"{book}: no pages (build the site first)")
    for page in pages:
        rel_page = page.relative_to(book).as_posix()
        for href in parse_page(page).hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("//"):
                continue
            fragment = unquote(parts.fragment)
            where = f"site {rel_page}: {href}"
            if not parts.path:
                if fragment and fragment not in parse_page(page).ids:
                    errors.append(f"{where}: no id #{fragment} on the page")
                continue
            target = Path(os.path.normpath(page.parent / unquote(parts.path)))
            if target.is_relative_to(book):
                if target.is_dir():
                    target = target / "index.html"
                if not target.exists():
                    errors.append(f"{where}: {target.relative_to(book)} is not in the site")
                elif fragment and target.suffix == ".html" and fragment not in parse_page(target).ids:
                    errors.append(f"{where}: no id #{fragment} on {target.relative_to(book)}")
                continue
            # Left the site: a 404 for a reader, whatever the repository holds there.
            repo = Path(os.path.normpath(SRC / os.path.relpath(target, book)))
            errors.append(
                f"{where}: leaves the site (to {os.path.relpath(repo, ROOT)}): link a page of "
                "the site, include the file in one, or use an absolute URL"
            )


def check_markdown(errors):
    files = sorted({p for g in MARKDOWN_GLOBS for p in ROOT.glob(g) if "target" not in p.parts})
    for md in files:
        text = strip_code(md.read_text(encoding="utf-8"))
        links = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
        links += re.findall(r"^\[[^\]]+\]:\s*(\S+)", text, flags=re.M)
        for link in links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue
            fragment = unquote(parts.fragment)
            where = f"{md.relative_to(ROOT)}: {link}"
            target = md if not parts.path else Path(os.path.normpath(md.parent / unquote(parts.path)))
            check_repo_target(target, fragment, where, errors)
    return len(files)


def main():
    book = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "target" / "book")
    errors = []
    check_book(book, errors)
    n = check_markdown(errors)
    if errors:
        print(f"{len(errors)} broken link(s):", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        sys.exit(1)
    print(f"links: every relative link and anchor resolves (site {book}, {n} Markdown files outside it)")


if __name__ == "__main__":
    main()
