#!/usr/bin/python3
"""Extracts the C++ code blocks of the user documentation into files, one file per block.

Pages: README.md and docs/*.md (or the Markdown files given after the output directory). Every fenced block whose
info string is cpp (```cpp, also c++ / cxx / cc) becomes <out>/<page>_<index>.cpp, where <page> is the page's path
with '/' and '.' turned into '_' (README_md, docs_concepts_md) and <index> the 0-based number of the C++ block on
that page, counted over all of them (so names stay stable when a fragment is marked). A block preceded by the HTML
comment <!-- snippet: fragment --> (on the line before the fence, blank lines allowed between) is a fragment that
does not compile on its own and is skipped. Blocks preceded by <!-- snippet: part NAME --> are one program written in
pieces: the blocks of a page with the same NAME are joined, in page order, into <out>/<page>_<NAME>.cpp. Each file starts with a comment naming the page and the line of the
block. Prints one line per file written and a summary; exits 1 when a page is missing or a fence is unclosed.
The script does not compile anything: a test may compile the files it writes.

Usage: scripts/extract-doc-snippets.py OUT_DIR [page.md ...]
Standard library only.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_PAGES = ["README.md", "docs/*.md"]
OPEN = re.compile(r"^\s{0,3}(```+|~~~+)\s*([\w+-]*)")
FRAGMENT = re.compile(r"^\s*<!--\s*snippet:\s*fragment\s*-->\s*$")
PART = re.compile(r"^\s*<!--\s*snippet:\s*part\s+([A-Za-z0-9_-]+)\s*-->\s*$")
CPP = {"cpp", "c++", "cxx", "cc"}


def blocks_of(page):
    """(line number, kind, code) of every C++ block of page; kind: "fragment", ("part", NAME) or "program"."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i, last_text = [], 0, ""
    while i < len(lines):
        m = OPEN.match(lines[i])
        if not m:
            if lines[i].strip():
                last_text = lines[i]
            i += 1
            continue
        fence, language, start = m.group(1), m.group(2).lower(), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        if j == len(lines):
            raise ValueError(f"{page.relative_to(ROOT)}:{start + 1}: unclosed code fence")
        if language in CPP:
            part = PART.match(last_text)
            kind = "fragment" if FRAGMENT.match(last_text) else ("part", part.group(1)) if part else "program"
            found.append((start + 1, kind, "\n".join(lines[start + 1:j]) + "\n"))
        last_text = lines[j]
        i = j + 1
    return found


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out = pathlib.Path(argv[0])
    if argv[1:]:
        pages = [pathlib.Path(a) if pathlib.Path(a).is_absolute() else ROOT / a for a in argv[1:]]
    else:
        pages = []
        for pattern in DEFAULT_PAGES:
            pages += sorted(ROOT.glob(pattern))
    out.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    for page in pages:
        if not page.is_file():
            print(f"extract-doc-snippets: {page}: page not found", file=sys.stderr)
            return 1
        relative = page.resolve().relative_to(ROOT).as_posix()
        stem = relative.replace("/", "_").replace(".", "_")
        try:
            blocks = blocks_of(page.resolve())
        except ValueError as e:
            print(f"extract-doc-snippets: {e}", file=sys.stderr)
            return 1
        parts = {}
        for index, (line, kind, code) in enumerate(blocks):
            if kind == "fragment":
                skipped += 1
                continue
            if kind != "program":
                parts.setdefault(kind[1], []).append((line, code))
                continue
            target = out / f"{stem}_{index}.cpp"
            target.write_text(f"// Extracted from {relative}:{line} by scripts/extract-doc-snippets.py.\n" + code)
            print(target)
            written += 1
        for name, pieces in parts.items():
            target = out / f"{stem}_{name}.cpp"
            text = "".join(f"// Extracted from {relative}:{line} by scripts/extract-doc-snippets.py.\n{code}"
                           for line, code in pieces)
            target.write_text(text)
            print(target)
            written += 1
    print(f"extract-doc-snippets: {written} block(s) written to {out}, {skipped} fragment(s) skipped",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
