#!/usr/bin/env python3
"""The layering of src/lib.rs, checked: every top-level module has one of the seven layers
(read from lib.rs's own list, "N. Name — [`module`] ..."), and no file under src/ names a
module of a higher layer through a `crate::` or `super::` path. Prints each upward path with
its file and line; exits 1 if there is one, or a module without a layer.

Unit tests are not held to it (a `tests` module's files, and a file's text from its first
`#[cfg(test)]` module on): a pipeline step's tests may build the whole application to drive
it. The code they test may not.

Run by scripts/structure.sh. Usage: layers.py [SRC_DIR]
"""
import pathlib
import re
import sys

SRC = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src")

LAYER_LINE = re.compile(r"^//!\s+(\d)\.\s")
MODULE_REF = re.compile(r"\[`([a-z_][a-z0-9_]*)`\]")
# A path that starts at the crate root or climbs out of the file's module.
PATH = re.compile(r"\b(crate|super)((?:::super)*)::(\{|[a-z_][a-z0-9_]*)")


def layers(lib: pathlib.Path) -> dict:
    """Module -> layer, from lib.rs's doc list (until its first non-doc line)."""
    found, layer = {}, None
    for line in lib.read_text().splitlines():
        if not line.startswith("//!"):
            break
        m = LAYER_LINE.match(line)
        if m:
            layer = int(m.group(1))
        if layer is not None:
            for name in MODULE_REF.findall(line):
                found.setdefault(name, layer)
    return found


def declared(lib: pathlib.Path) -> list:
    return re.findall(r"^pub mod ([a-z_][a-z0-9_]*);", lib.read_text(), re.M)


def module_path(path: pathlib.Path) -> list:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    if parts in (["lib"], ["main"]):
        return []
    return parts


def strip_comments(text: str) -> str:
    """Line comments and string literals out (a path in a doc comment is no import)."""
    text = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


def group_heads(text: str, start: int) -> list:
    """The first segment of each item of the `{...}` group opening at `start`."""
    depth, item, heads, i = 0, "", [], start
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c == "}":
            depth -= 1
            if depth == 0:
                heads.append(item)
                break
        elif c == "," and depth == 1:
            heads.append(item)
            item = ""
            i += 1
            continue
        if depth >= 1:
            item += c
        i += 1
    names = []
    for h in heads:
        m = re.match(r"\s*([a-z_][a-z0-9_]*)", h)
        if m and m.group(1) not in ("self",):
            names.append(m.group(1))
    return names


def targets(text: str, here: list):
    """(line, top-level module) for every path out of the file's module."""
    for m in PATH.finditer(text):
        root, supers, head = m.group(1), m.group(2), m.group(3)
        if root == "crate":
            base = []
        else:
            ups = 1 + supers.count("super")
            # A file's own module is `here`; `super` is its parent.
            if ups > len(here):
                continue  # a path the compiler would refuse
            base = here[: len(here) - ups]
        heads = group_heads(text, m.start(3)) if head == "{" else [head]
        line = text.count("\n", 0, m.start()) + 1
        for h in heads:
            path = base + [h]
            if path:
                yield line, path[0]


def main() -> int:
    lib = SRC / "lib.rs"
    layer_of = layers(lib)
    status = 0
    for name in declared(lib):
        if name not in layer_of:
            print(f"structure: module {name} has no layer in src/lib.rs's list")
            status = 1
    for path in sorted(SRC.rglob("*.rs")):
        here = module_path(path)
        if not here:
            continue
        own = layer_of.get(here[0])
        if own is None:
            continue
        if "tests" in here:
            continue
        text = strip_comments(path.read_text())
        test_module = re.search(r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s", text)
        if test_module:
            text = text[: test_module.start()]
        for line, target in targets(text, here):
            theirs = layer_of.get(target)
            if theirs is not None and theirs > own:
                print(
                    f"structure: {path}:{line}: {here[0]} (layer {own}) names {target} (layer {theirs})"
                )
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
