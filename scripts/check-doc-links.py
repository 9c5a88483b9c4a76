#!/usr/bin/python3
"""Checks that every relative link in the user documentation resolves.

Pages checked: README.md, docs/*.md and bench/README.md (or the Markdown files given as arguments, relative to the
repository root or absolute). For each inline link or image, [text](target) or ![alt](target), and each reference
definition, [label]: target, whose target is relative (no scheme such as https:, no mailto:):
  - the file or directory it names must exist, relative to the page;
  - a #anchor must match a heading of the target page (or of the page itself for a bare #anchor), with GitHub's
    slugs: lower case, punctuation other than '-' and '_' removed, spaces turned into '-', and -1, -2, ...
    appended to repeated slugs; explicit <a name="..."> / id="..." anchors count too.
Links inside fenced code blocks and inline code are ignored. Prints one line per dead link (page:line: target:
reason) and exits 1 when there is one, 0 otherwise. Python standard library only.

Usage: scripts/check-doc-links.py [page.md ...]
"""
import pathlib
import re
import sys
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_PAGES = ["README.md", "docs/*.md", "bench/README.md"]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"|\sid=\"([^\"]+)\"")


def strip_code(lines):
    """The lines with fenced code blocks blanked and inline code removed (line numbers kept)."""
    out, fenced = [], False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        elif fenced:
            out.append("")
        else:
            out.append(INLINE_CODE.sub("", line))
    return out


def slug(heading_text):
    """GitHub's anchor for a heading: markup removed, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading_text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


_anchor_cache = {}


def anchors_of(page):
    if page not in _anchor_cache:
        anchors, seen = set(), {}
        lines = page.read_text(encoding="utf-8").splitlines()
        fenced = False
        for line in lines:
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                anchors.add(base if n == 0 else f"{base}-{n}")
            for a in HTML_ANCHOR.finditer(line):
                anchors.add(a.group(1) or a.group(2))
        _anchor_cache[page] = anchors
    return _anchor_cache[page]


def is_external(target):
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target)) or target.startswith("//")


def check_page(page):
    errors = []
    lines = strip_code(page.read_text(encoding="utf-8").splitlines())
    for number, line in enumerate(lines, 1):
        targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
        ref = REFERENCE_DEF.match(line)
        if ref:
            targets.append(ref.group(1))
        for target in targets:
            if is_external(target):
                continue
            path_part, _, anchor = target.partition("#")
            path_part = urllib.parse.unquote(path_part)
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            if path_part:
                resolved = (page.parent / path_part).resolve()
                if not resolved.exists():
                    errors.append(f"{where}: no such file or directory")
                    continue
            else:
                resolved = page
            if anchor:
                if resolved.is_dir() or resolved.suffix.lower() != ".md":
                    errors.append(f"{where}: an anchor into something that is not a Markdown page")
                elif urllib.parse.unquote(anchor).lower() not in anchors_of(resolved):
                    errors.append(f"{where}: no heading with the anchor #{anchor} in {resolved.relative_to(ROOT)}")
    return errors


def main(argv):
    if argv:
        pages = [pathlib.Path(a) if pathlib.Path(a).is_absolute() else ROOT / a for a in argv]
    else:
        pages = []
        for pattern in DEFAULT_PAGES:
            pages += sorted(ROOT.glob(pattern))
    errors = []
    for page in pages:
        if not page.is_file():
            errors.append(f"{page}: page not found")
            continue
        errors += check_page(page.resolve())
    for e in errors:
        print(e)
    if errors:
        print(f"check-doc-links: {len(errors)} dead link(s) in {len(pages)} page(s)", file=sys.stderr)
        return 1
    print(f"check-doc-links: every relative link of {len(pages)} page(s) resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
