#!/usr/bin/env python3
"""Fail when files of one crate take names from each other, directly or through others (issue 35).

A file A depends on a file B of the same crate when A names an item that B defines (fn, struct,
enum, union, trait, type, const, static, macro_rules!) through a path that starts with `crate`,
`super` or `self`: in a `use` declaration or inline (`crate::m::Item`, `super::Item`, also
inside macros as `$crate::m::Item`). A path to a module that only re-exports the item
(`pub use ...`) is followed to the file that defines it. Comments, string and character
literals, and code under `#[cfg(test)]` (an item, or a whole file whose `mod` declaration is
test-only) are not read. Crate roots (`src/lib.rs`, `src/main.rs`) are left out: everything
names them and they name everything. Globs (`use super::*`) and plain relative paths
(`child::Item`) are not counted.

A circle is a set of files that all reach each other by such dependencies (a strongly
connected component of more than one file). Each is printed as its files; the exit status is 1
when there is one, 0 with one line "no circles" otherwise.

    python3 ops/check-module-cycles.py              # every crate: */src
    python3 ops/check-module-cycles.py store/src    # some crates' src dirs
    python3 ops/check-module-cycles.py --self-test  # the checker against crates it builds

Standard library only (Python 3.11).
"""

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------
# Reading a file: what the compiler would see outside tests, without comments and literals.
# ---------------------------------------------------------------------------------------------

IDENT_CHAR = re.compile(r"[A-Za-z0-9_]")
RAW_STRING_START = re.compile(r'(?:b|c)?r(#*)"')


def strip_comments_and_literals(text: str) -> str:
    """The code with comments turned into spaces and every string or character literal into
    `""`, newlines kept. Lifetimes (`'a`) are code and stay."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            # Block comments nest in Rust.
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
            out.append(" ")
        elif (m := RAW_STRING_START.match(text, i)) and not (i and IDENT_CHAR.match(text[i - 1])):
            closing = '"' + m.group(1)
            end = text.find(closing, m.end())
            end = n if end < 0 else end + len(closing)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            i = skip_char_literal(text, i, out)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def skip_char_literal(text: str, i: int, out: list) -> int:
    """At a `'`: a character literal becomes `""`; a lifetime or label is kept as it is."""
    if text.startswith("\\", i + 1):
        # '\n', '\'', '\u{1F600}': the closing quote follows the escape.
        end = text.find("'", i + 3)
        out.append('""')
        return len(text) if end < 0 else end + 1
    if i + 2 < len(text) and text[i + 2] == "'":
        out.append('""')
        return i + 3
    out.append("'")
    return i + 1


CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
TEST_MOD_DECL = re.compile(r"(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*;")


def drop_test_items(code: str) -> tuple[str, set[str]]:
    """The code without the items under `#[cfg(test)]`, and the names of the modules declared
    test-only (`#[cfg(test)] mod name;`), whose files are test code entirely."""
    test_mods = set()
    while m := CFG_TEST.search(code):
        start, i = m.start(), skip_attributes(code, m.end())
        end = item_end(code, i)
        if decl := TEST_MOD_DECL.match(code, i):
            test_mods.add(decl.group(1))
        # Blank the item out, keeping its newlines.
        code = code[:start] + "\n" * code.count("\n", start, end) + code[end:]
    return code, test_mods


def skip_attributes(code: str, i: int) -> int:
    """Past the whitespace and any further `#[...]` attributes starting at `i`."""
    while True:
        while i < len(code) and code[i].isspace():
            i += 1
        if not code.startswith("#[", i):
            return i
        i = matching(code, i + 1)


def item_end(code: str, i: int) -> int:
    """Where the item starting at `i` ends: after its `;`, or after the `}` closing its body."""
    depth = 0
    while i < len(code):
        c = code[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == ";" and depth == 0:
            return i + 1
        elif c == "{" and depth == 0:
            return matching(code, i)
        i += 1
    return len(code)


def matching(code: str, i: int) -> int:
    """Just after the bracket that closes the one at `i` (literals are already gone)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    while i < len(code):
        c = code[i]
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return len(code)


# ---------------------------------------------------------------------------------------------
# What a file declares and what it names.
# ---------------------------------------------------------------------------------------------

VIS = r"(?:pub(?:\s*\([^)]*\))?\s+)?"
ITEM = re.compile(
    r"(?m)^\s*" + VIS + r"(?:(?:default|const|async|unsafe|extern\s*(?:\"\")?)\s+)*"
    r"(?:fn|struct|enum|union|trait|type|const|static)\s+(?:mut\s+)?([A-Za-z_]\w*)"
)
MACRO = re.compile(r"\bmacro_rules!\s*([A-Za-z_]\w*)")
MOD_DECL = re.compile(r"(?m)^\s*(?:#\[[^\]]*\]\s*)*" + VIS + r"mod\s+([A-Za-z_]\w*)\s*;")
USE = re.compile(r"(?<![\w:])(" + VIS + r")use\s+([^;]+);")
INLINE_PATH = re.compile(r"(?<![\w:])((?:crate|super|self)(?:\s*::\s*[A-Za-z_]\w*)+)")


def expand_use_tree(tree: str) -> list[tuple[list[str], str]]:
    """`a::{b, c::{d as e, self}, f::*}` -> [(path, the name it binds)]: (a::b, b),
    (a::c::d, e), (a::c, c), (a::f::*, *)."""
    tokens = re.findall(r"::|[{},*]|[A-Za-z_]\w*", tree)
    pos = 0

    def parse(prefix: list[str]) -> list[tuple[list[str], str]]:
        nonlocal pos
        path = list(prefix)
        while pos < len(tokens):
            tok = tokens[pos]
            if tok == "::":
                pos += 1
            elif tok == "{":
                pos += 1
                found = []
                while pos < len(tokens) and tokens[pos] != "}":
                    if tokens[pos] == ",":
                        pos += 1
                        continue
                    found += parse(path)
                pos += 1  # the closing brace
                return found
            elif tok == "*":
                pos += 1
                return [(path + ["*"], "*")]
            elif tok in (",", "}"):
                break
            elif tok == "as":
                alias = tokens[pos + 1]
                pos += 2
                return [(path, alias)]
            elif tok == "self" and path:
                pos += 1  # `m::{self}` names the module m itself
            else:
                path.append(tok)
                pos += 1
        return [(path, path[-1] if path else "")]

    return parse([])


@dataclass
class SourceFile:
    """One `.rs` file as far as this check reads it."""

    path: Path
    code: str
    test_mods: set[str]
    defines: set[str] = field(default_factory=set)
    # name -> path of an explicit `pub use` re-export; module paths of `pub use m::*`.
    reexports: dict[str, list[str]] = field(default_factory=dict)
    reexport_globs: list[list[str]] = field(default_factory=list)
    named: list[list[str]] = field(default_factory=list)  # paths from crate/super/self

    @classmethod
    def read(cls, path: Path) -> "SourceFile":
        text = path.read_text(errors="replace")
        code, test_mods = drop_test_items(strip_comments_and_literals(text))
        f = cls(path, code, test_mods)
        f.defines = set(ITEM.findall(code)) | set(MACRO.findall(code))
        for m in USE.finditer(code):
            is_pub = bool(m.group(1).strip())
            for segs, alias in expand_use_tree(m.group(2)):
                if is_pub and alias == "*":
                    f.reexport_globs.append(segs[:-1])
                elif is_pub and alias:
                    f.reexports[alias] = segs
                if segs and segs[0] in ("crate", "super", "self") and alias != "*":
                    f.named.append(segs)
        for m in INLINE_PATH.finditer(code):
            f.named.append(re.sub(r"\s+", "", m.group(1)).split("::"))
        return f


# ---------------------------------------------------------------------------------------------
# A crate: its module trees from each root, and which file names which.
# ---------------------------------------------------------------------------------------------


def child_file(parent: Path, is_dir_owner: bool, name: str) -> Path | None:
    """The file of module `name` declared in `parent` (a root or mod.rs owns its directory;
    any other file `x.rs` puts its children under `x/`)."""
    base = parent.parent if is_dir_owner else parent.parent / parent.stem
    for candidate in (base / f"{name}.rs", base / name / "mod.rs"):
        if candidate.is_file():
            return candidate
    return None


def module_tree(root: Path, files: dict[Path, SourceFile]) -> dict[tuple, Path]:
    """Module path -> file, for every module reachable from `root` through `mod name;`
    declarations outside tests."""
    tree = {(): root}
    todo = [((), root, True)]
    while todo:
        modpath, path, owns_dir = todo.pop()
        src = files.get(path) or files.setdefault(path, SourceFile.read(path))
        for name in MOD_DECL.findall(src.code):
            if name in src.test_mods:
                continue
            child = child_file(path, owns_dir, name)
            if child is not None and modpath + (name,) not in tree:
                tree[modpath + (name,)] = child
                todo.append((modpath + (name,), child, child.name == "mod.rs"))
    return tree


class Crate:
    """The files of one crate's src dir and the resolution of the paths they name."""

    def __init__(self, src_dir: Path):
        self.src_dir = src_dir
        self.files: dict[Path, SourceFile] = {}
        self.roots = [p for p in (src_dir / "lib.rs", src_dir / "main.rs") if p.is_file()]
        self.trees = [module_tree(r, self.files) for r in self.roots]

    def edges(self) -> dict[Path, set[Path]]:
        """File -> the files of the same crate it names items of (roots left out)."""
        roots = set(self.roots)
        graph: dict[Path, set[Path]] = {}
        for tree in self.trees:
            module_of = {path: modpath for modpath, path in tree.items()}
            for path, modpath in module_of.items():
                if path in roots:
                    continue
                targets = graph.setdefault(path, set())
                for segs in self.files[path].named:
                    found = self.resolve(tree, modpath, segs, set())
                    if found is not None and found != path and found not in roots:
                        targets.add(found)
        return graph

    def resolve(self, tree: dict, here: tuple, segs: list[str], seen: set) -> Path | None:
        """The file defining the item `segs` names from module `here`, or None (a module, an
        item of another crate, or not found)."""
        if not segs:
            return None
        if segs[0] == "crate":
            base, rest = (), segs[1:]
        elif segs[0] in ("super", "self"):
            base, rest = here, segs
            while rest and rest[0] in ("super", "self"):
                base = base[:-1] if rest[0] == "super" else base
                rest = rest[1:]
        elif here + (segs[0],) in tree:
            base, rest = here, segs  # a child module, named relatively (in a re-export)
        else:
            return None  # another crate
        # The longest prefix that is a module; the next segment is the item.
        for cut in range(len(rest) - 1, -1, -1):
            module = base + tuple(rest[:cut])
            if module in tree:
                return self.find_item(tree, module, rest[cut], seen)
        return None

    def find_item(self, tree: dict, module: tuple, name: str, seen: set) -> Path | None:
        """The file defining `name` as seen in `module`: its own file, or where its re-exports
        lead (a re-export of a re-export is followed too)."""
        if (module, name) in seen:
            return None
        seen.add((module, name))
        src = self.files[tree[module]]
        if name in src.defines:
            return tree[module]
        if name in src.reexports:
            return self.resolve(tree, module, src.reexports[name], seen)
        for glob in src.reexport_globs:
            found = self.resolve(tree, module, glob + [name], seen)
            if found is not None:
                return found
        return None


def circles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """The strongly connected components of more than one file (Tarjan, without recursion)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def check(src_dirs: list[Path], shown_from: Path) -> list[list[str]]:
    """Every circle of every crate, each as its files relative to `shown_from`."""
    result = []
    for src_dir in src_dirs:
        for component in circles(Crate(src_dir).edges()):
            result.append([p.relative_to(shown_from).as_posix() for p in component])
    return result


# ---------------------------------------------------------------------------------------------
# The self-test: small crates with known answers.
# ---------------------------------------------------------------------------------------------

SELF_TEST_CRATES = {
    # a -> b through a use, b -> m/c inline, m/c -> a through super:: and the re-export (with
    # a new name) in m/mod.rs, which defines nothing and so is no part of the circle.
    "circle": {
        "lib.rs": "mod a;\nmod b;\nmod m;\npub use a::A;\n",
        "a.rs": "use crate::b::B;\npub struct A(B);\n",
        "b.rs": "pub struct B;\npub fn make() -> crate::m::c::C { crate::m::c::C }\n",
        "m/mod.rs": "pub mod c;\npub use crate::a::A as Again;\n",
        "m/c.rs": "pub struct C;\nimpl C { fn a(&self) -> super::Again { todo!() } }\n",
    },
    # The same names, but only from tests, comments, strings, a glob and a module path: no circle.
    "no_circle": {
        "lib.rs": "mod a;\nmod b;\n#[cfg(test)]\nmod only_tests;\n",
        "a.rs": "use crate::b::B;\npub struct A(B);\n",
        "b.rs": (
            "pub struct B;\n"
            "// uses crate::a::A in a comment\n"
            "/* and /* nested */ crate::a::A */\n"
            'const S: &str = "crate::a::A";\n'
            "const Q: char = '\"';\n"
            "fn keep<'a>(x: &'a str) -> &'a str { x }\n"
            "use super::*;\n"
            "#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n"
            "fn after_tests() -> u8 { 1 }\n"
        ),
        "only_tests.rs": "use crate::a::A;\nuse crate::b::B;\npub struct T(A, B);\n",
    },
}


def self_test() -> int:
    """Builds the crates above in a temporary directory and checks the answers."""
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        for crate, files in SELF_TEST_CRATES.items():
            for name, text in files.items():
                path = top / crate / "src" / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
        got = {crate: check([top / crate / "src"], top) for crate in SELF_TEST_CRATES}
        # Only what a file outside tests names counts, and b's after_tests is outside them.
        b = SourceFile.read(top / "no_circle" / "src" / "b.rs")
    want = {
        "circle": [["circle/src/a.rs", "circle/src/b.rs", "circle/src/m/c.rs"]],
        "no_circle": [],
    }
    failures = [f"{c}: got {got[c]}, want {want[c]}" for c in want if got[c] != want[c]]
    if "after_tests" not in b.defines or b.named:
        failures.append(f"no_circle/src/b.rs: defines {sorted(b.defines)}, names {b.named}")
    for line in failures:
        print("self-test FAILED: " + line)
    if not failures:
        print("self-test ok: a circle through use, inline, super:: and re-exports is found; "
              "tests, comments, strings and globs make none")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src_dirs", nargs="*", type=Path, help="crate src dirs (default: */src)")
    parser.add_argument("--self-test", action="store_true", help="check the checker and exit")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    src_dirs = [d.resolve() for d in args.src_dirs] or sorted(ROOT.glob("*/src"))
    src_dirs = [d for d in src_dirs if (d / "lib.rs").is_file() or (d / "main.rs").is_file()]
    found = check(src_dirs, ROOT)
    for component in found:
        print(f"circle of {len(component)}: " + ", ".join(component))
    print(f"{len(found)} circles" if found else f"no circles in {len(src_dirs)} crates")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
