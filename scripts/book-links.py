#!/usr/bin/env python3
"""Fail on a broken internal link in the built book and in the README.

Usage: scripts/book-links.py BUILD_DIR README.md

- The book is checked as built (BUILD_DIR, mdbook's HTML): every relative href or src of every
  page must name a file that exists (inside the build or beside it in the repository, as
  `../../status-page.png` does), and a #fragment must be an id of the page it names. Checking
  the output rather than the Markdown catches what mdbook made of the links (`.md` rewritten to
  `.html`, `{{#include}}`d text) and its own heading ids.
- The README is checked as Markdown, the way a repository browser renders it: a relative link
  must name an existing file, and a #fragment into a Markdown file must be the slug of one of
  its headings.
Links with a scheme (https:, mailto:) are not followed: they are not internal.
"""
import html.parser
import pathlib
import re
import sys
import urllib.parse

SKIP_PAGES = {"404.html", "print.html", "toc.html"}  # mdbook's own, built from the same links


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if name in ("href", "src") and value is not None:
                self.links.append(value)


def internal(link):
    parts = urllib.parse.urlsplit(link)
    return not parts.scheme and not parts.netloc and not link.startswith("/")


def parse(path, cache={}):
    if path not in cache:
        page = Page()
        page.feed(path.read_text(encoding="utf-8"))
        cache[path] = page
    return cache[path]


def check_book(build):
    errors = []
    for page_path in sorted(build.rglob("*.html")):
        if page_path.name in SKIP_PAGES:
            continue
        page = parse(page_path)
        for link in page.links:
            if not internal(link):
                continue
            parts = urllib.parse.urlsplit(link)
            target = page_path
            if parts.path:
                target = (page_path.parent / urllib.parse.unquote(parts.path)).resolve()
                if not target.exists():
                    errors.append(f"{page_path.relative_to(build)}: {link}: no such file")
                    continue
            if parts.fragment and target.suffix == ".html":
                fragment = urllib.parse.unquote(parts.fragment)
                if fragment not in parse(target).ids:
                    errors.append(f"{page_path.relative_to(build)}: {link}: no such anchor")
    return errors


def slug(heading):
    """A heading's anchor as GitHub makes it (and mdbook too, for these headings)."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown(path):
    """(anchors, links) of a Markdown file, outside fenced code."""
    anchors, links, fenced = set(), [], False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            base = slug(m.group(1))
            name, n = base, 1
            while name in anchors:
                name, n = f"{base}-{n}", n + 1
            anchors.add(name)
        links += re.findall(r"\]\(([^)\s]+)\)", line)
    return anchors, links


def check_markdown(path):
    errors = []
    _, links = markdown(path)
    for link in links:
        if not internal(link):
            continue
        parts = urllib.parse.urlsplit(link)
        target = path
        if parts.path:
            target = (path.parent / urllib.parse.unquote(parts.path)).resolve()
            if not target.exists():
                errors.append(f"{path}: {link}: no such file")
                continue
        if parts.fragment and target.suffix == ".md":
            if parts.fragment not in markdown(target)[0]:
                errors.append(f"{path}: {link}: no such anchor")
    return errors


def main():
    build, readme = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2])
    pages = [p for p in build.rglob("*.html") if p.name not in SKIP_PAGES]
    if not pages:
        sys.exit(f"no built pages in {build}")
    errors = check_book(build) + check_markdown(readme)
    for error in errors:
        print(f"broken link: {error}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print(f"links: {len(pages)} pages and {readme} checked, none broken")


if __name__ == "__main__":
    main()
