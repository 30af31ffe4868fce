#!/usr/bin/env python3
"""Fail when a relative link or #anchor in a tracked Markdown file leads nowhere (issue 39).

Every file `git ls-files '*.md'` lists is read. A link is an inline link or image
(`[text](target)`, `![alt](target)`) or a reference definition (`[name]: target`); links inside
fenced code blocks and code spans are not links. Targets with a scheme (`https:`, `http:`,
`mailto:`, ...) are not checked. Every other target must name an existing file or folder,
relative to the linking file (or to the repository for a leading `/`); when it names a Markdown
file and carries `#anchor`, or is only `#anchor` (this file), the anchor must be one of that
file's headings, slugged the way GitHub does it: the heading's text without its Markdown
(code-span backticks, emphasis, a link's target), lowercased, every character dropped that is
not a letter, digit, `_`, `-` or space, each space turned into `-`; a repeated slug gets `-1`,
`-2`, ... in order. `<a id="...">` and `<a name="...">` anchors count too.

Each broken link is printed as `file:line: target: why`, and the exit status is 1; with none,
one line says how many links were checked, and the exit status is 0.

    python3 ops/check-links.py              # every tracked *.md file
    python3 ops/check-links.py README.md    # some files (their targets may be any file)
    python3 ops/check-links.py --self-test  # the checker against pages it writes

Standard library only (Python 3.11).
"""

import argparse
import re
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>\n]*>|[^()\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*(<[^>\n]*>|\S+)", re.M)
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


# ---------------------------------------------------------------------------------------------
# Reading a page: what GitHub renders as text, with code blanked out and line numbers kept.
# ---------------------------------------------------------------------------------------------


def blank(text: str) -> str:
    """`text` with every character but the newlines turned into a space."""
    return re.sub(r"[^\n]", " ", text)


def without_fences(lines: list[str]) -> list[str]:
    """The lines, those inside fenced code blocks (and the fences themselves) blanked."""
    out, fence = [], None
    for line in lines:
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            out.append("")
        elif fence is not None:
            closing = match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence)
            if closing and line.strip() == match.group(1):
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def without_code_spans(text: str) -> str:
    """`text` with every code span blanked, backticks included. A run of backticks opens a span
    closed by the next run of the same length within the paragraph; otherwise it is literal."""
    out, i = [], 0
    for run in re.finditer(r"`+", text):
        if run.start() < i:
            continue
        paragraph_end = text.find("\n\n", run.end())
        limit = len(text) if paragraph_end < 0 else paragraph_end
        closing = re.compile(r"(?<!`)" + run.group(0) + r"(?!`)")
        close = closing.search(text, run.end(), limit)
        if close is None:
            continue
        out.append(text[i : run.start()])
        out.append(blank(text[run.start() : close.end()]))
        i = close.end()
    out.append(text[i:])
    return "".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before numbering repeats)."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)  # links: text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    kept = []
    for c in text.lower():
        category = unicodedata.category(c)
        if c in " -_" or category[0] in "LMN":
            kept.append(c)
    return "".join(kept).replace(" ", "-")


class Page:
    """One Markdown file: its anchors and its links with their line numbers."""

    def __init__(self, text: str):
        lines = without_fences(text.split("\n"))
        self.anchors: set[str] = set()
        seen: dict[str, int] = {}
        for number, line in enumerate(lines):
            heading = None
            match = ATX_HEADING.match(line)
            if match:
                heading = match.group(2) or ""
            elif (
                number > 0
                and SETEXT_UNDERLINE.match(line)
                and lines[number - 1].strip()
                and not ATX_HEADING.match(lines[number - 1])
                and not lines[number - 1].lstrip().startswith(("|", "-", "*", "+", ">"))
            ):
                heading = lines[number - 1].strip()
            if heading is not None:
                base = slug(heading)
                count = seen.get(base, 0)
                seen[base] = count + 1
                self.anchors.add(base if count == 0 else f"{base}-{count}")
        body = without_code_spans("\n".join(lines))
        self.anchors.update(HTML_ANCHOR.findall(body))
        self.links: list[tuple[int, str]] = []
        for match in INLINE_LINK.finditer(body):
            self.links.append((body.count("\n", 0, match.start(2)) + 1, match.group(2)))
        for match in REFERENCE_DEFINITION.finditer(body):
            self.links.append((body.count("\n", 0, match.start(1)) + 1, match.group(1)))
        self.links.sort()


# ---------------------------------------------------------------------------------------------
# Checking
# ---------------------------------------------------------------------------------------------


def check(files: list[Path], root: Path) -> tuple[list[str], int]:
    """The broken links of `files` as `file:line: target: why`, and how many links were read."""
    pages: dict[Path, Page] = {}

    def page(path: Path) -> Page:
        if path not in pages:
            pages[path] = Page(path.read_text(encoding="utf-8"))
        return pages[path]

    problems, checked = [], 0
    for path in files:
        name = path.relative_to(root).as_posix()
        for line, raw in page(path).links:
            target = raw[1:-1] if raw.startswith("<") and raw.endswith(">") else raw
            if SCHEME.match(target):
                continue  # https:, http:, mailto: and any other scheme: not ours to check
            checked += 1
            file_part, _, anchor = target.partition("#")
            file_part = unquote(file_part)
            if not file_part:
                linked = path
            elif file_part.startswith("/"):
                linked = root / file_part.lstrip("/")
            else:
                linked = path.parent / file_part
            if not linked.exists():
                problems.append(f"{name}:{line}: {target}: no such file")
                continue
            if not anchor or linked.is_dir() or linked.suffix.lower() != ".md":
                continue
            if unquote(anchor) not in page(linked.resolve()).anchors:
                where = "this file" if not file_part else linked.resolve().relative_to(root).as_posix()
                problems.append(f"{name}:{line}: {target}: no heading with anchor #{anchor} in {where}")
    return problems, checked


def tracked_markdown(root: Path) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "*.md"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    return [(root / name).resolve() for name in listed.split("\0") if name]


# ---------------------------------------------------------------------------------------------
# Self-test
# ---------------------------------------------------------------------------------------------

SELF_TEST_PAGES = {
    "README.md": """# Title

See [the guide](docs/guide.md#choosing-max_in_flight-and-claim_batch), [again](docs/guide.md#run-it-1),
[a folder](docs/), [the web](https://example.invalid/x#y), [mail](mailto:a@example.invalid),
[here](#title) and [gone](#nothing-here).

```sh
echo "[not a link](missing.md)"
# not a heading
```

`[not a link either](missing.md)`, [an image](docs/missing.png) and a definition:

[ref]: docs/guide.md#what--why
""",
    "docs/guide.md": """# Choosing `max_in_flight` and `claim_batch`

## Run it

## Run it

## What – why?

Setext heading
--------------

<a id="custom"></a> [up](../README.md#title), [custom](#custom), [setext](#setext-heading),
[wrong](../README.md#run-it).
""",
}


def self_test() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp).resolve()
        for name, text in SELF_TEST_PAGES.items():
            (top / name).parent.mkdir(parents=True, exist_ok=True)
            (top / name).write_text(text)
        problems, checked = check([top / name for name in SELF_TEST_PAGES], top)
    want = [
        "README.md:5: #nothing-here: no heading with anchor #nothing-here in this file",
        "README.md:12: docs/missing.png: no such file",
        "docs/guide.md:13: ../README.md#run-it: no heading with anchor #run-it in README.md",
    ]
    failures = [f"got {problems}, want {want}"] if problems != want else []
    if checked != 11:
        failures.append(f"checked {checked} links, want 11")
    for line in failures:
        print("self-test FAILED: " + line)
    if not failures:
        print("self-test ok: slugs with code, dashes and repeats, setext and <a id> anchors, "
              "folders; fences, code spans and other schemes are not links")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: git ls-files '*.md')")
    parser.add_argument("--self-test", action="store_true", help="check the checker and exit")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    files = [f.resolve() for f in args.files] or tracked_markdown(ROOT)
    problems, checked = check(files, ROOT)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} broken links of {checked} in {len(files)} files")
        return 1
    print(f"links ok: {checked} relative links and anchors in {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
