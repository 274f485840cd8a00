#!/usr/bin/env python3
"""Fails when an engine source includes a folder above its own layer.

The engine's folders form layers; a file may include its own folder and the
folders of lower layers, never a higher one or a sibling on the same layer:

    core < backend < ops, io, text < inspect < config, models < pipeline < studies

(config/ sits above inspect/: it reads the inspector's settings from the
settings table into inspect's value types.)

(cli/ and gui/ sit above all of them; the engine never includes them.)
Run by CTest (test `Layers.IncludesPointDown`) and usable by hand:
    python3 tools/check_layers.py [repository root]
"""
import pathlib
import re
import sys

RANK = {
    "core": 0,
    "backend": 1,
    "ops": 2,
    "io": 2,
    "text": 2,
    "inspect": 3,
    "config": 4,
    "models": 4,
    "pipeline": 5,
    "studies": 6,
}
ABOVE_ENGINE = {"cli", "gui"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z_]+)/', re.M)


def check(root: pathlib.Path) -> list[str]:
    engine = root / "engine"
    problems = []
    folders = sorted(p.name for p in engine.iterdir() if p.is_dir())
    for folder in folders:
        if folder not in RANK:
            problems.append(f"engine/{folder}/ has no layer: add it to tools/check_layers.py")
    for path in sorted(engine.rglob("*")):
        if path.suffix not in {".cpp", ".hpp", ".h", ".inc"}:
            continue
        rel = path.relative_to(engine)
        if len(rel.parts) < 2:
            continue
        own = rel.parts[0]
        text = path.read_text(errors="replace")
        for m in INCLUDE.finditer(text):
            target = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            where = f"engine/{rel}:{line}"
            if target in ABOVE_ENGINE:
                problems.append(f"{where} includes {target}/: the engine never depends on a front end")
            elif target == own or target not in RANK:
                continue
            elif RANK[target] >= RANK.get(own, -1):
                kind = "a sibling on the same layer" if RANK[target] == RANK.get(own) else "a higher layer"
                problems.append(f"{where} includes {target}/, {kind} ({own} may only include lower layers)")
    return problems


def self_test() -> int:
    """The check must fail on an upward include and a sibling include, and pass a clean tree."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for folder in RANK:
            (root / "engine" / folder).mkdir(parents=True)
        (root / "engine" / "ops" / "a.cpp").write_text('#include "core/x.hpp"\n#include "ops/y.hpp"\n')
        if check(root):
            print("self-test: a clean tree was flagged")
            return 1
        (root / "engine" / "inspect" / "b.cpp").write_text('#include "pipeline/session.hpp"\n')
        (root / "engine" / "io" / "c.hpp").write_text('#include "text/t.hpp"\n')
        found = check(root)
        if len(found) != 2 or "higher layer" not in found[0] + found[1] or "sibling" not in found[0] + found[1]:
            print("self-test: expected one upward and one sibling include, found", found)
            return 1
    print("self-test: ok")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) point up the layer order (see tools/check_layers.py)")
        return 1
    print("layers: every engine include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
