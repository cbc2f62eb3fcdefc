#!/usr/bin/env python3
"""Lists what runs against posenc's layering (docs/architecture.md) and exits non-zero if anything does.

C++ (src/, include/posenc/), bottom up: 0 options, enums, version; 1 detail; 2 ops; 3 functional;
4 modules (and the umbrella posenc.h); 5 export, io; 6 the programs (cli above demo and plot). A
file includes its own layer or lower ones; within the programs, demo/ and plot/ never include
cli/. The build enforces the same for every compiled file (cmake/posencLayers.cmake); this check
also covers headers no source includes, and runs without a build.

Python:
  - python/posenc/nn.py is the modules layer: it calls posenc's public operators
    (torch.ops.posenc.<name>, no private _name), never loads a library, and imports nothing of
    posenc's own;
  - python/posenc/distributed.py is the operators' layer, as the fake kernels of __init__.py:
    DTensor's sharding rules of the operators; it imports nothing of posenc's own and never loads
    a library;
  - python/posenc/__init__.py loads the library (the operators' layer), imports distributed (its
    rules) and imports nn last, as the umbrella;
  - python/posenc/integrations/ and python/posenc/onnx.py sit above both: they may import
    posenc, call only public operators, never load a library, and nothing in the package imports
    them (``import posenc`` never imports the libraries they integrate with);
  - the TorchScript sources of the export (src/export/torchscript/*.py) run in plain PyTorch,
    without posenc: they name no torch.ops operator and import only torch, typing and math.

    python3 scripts/check_layers.py        (from anywhere; ctest runs it as architecture.layers)
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def cpp_layer(relative):
    """The layer of a path relative to src/ or include/posenc/ (None: not layered)."""
    first = relative.split("/")[0]
    if first in ("options", "enums.h", "version.h"):
        return 0
    if first == "detail":
        return 1
    if first in ("ops", "ops.h"):
        return 2
    if first == "functional":
        return 3
    if first in ("modules", "posenc.h"):
        return 4
    if first in ("export", "export.h", "io"):
        return 5
    if first in ("cli", "demo", "plot"):
        return 6
    return None


def cpp_problems():
    files = {}
    for base in (ROOT / "src", ROOT / "include" / "posenc"):
        for path in base.rglob("*"):
            if path.suffix in (".h", ".cpp", ".cu", ".cuh"):
                files[path] = path.relative_to(base).as_posix()
    problems = []
    for path, relative in sorted(files.items()):
        own = cpp_layer(relative)
        if own is None:
            continue
        for included in re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', path.read_text(), flags=re.M):
            key = included[len("posenc/"):] if included.startswith("posenc/") else included
            if "/" not in key and not included.startswith("posenc/"):
                continue  # beside the file, or a system header
            theirs = cpp_layer(key)
            where = path.relative_to(ROOT)
            if theirs is not None and theirs > own:
                problems.append(f"{where} (layer {own}) includes {included} (layer {theirs})")
            elif relative.split("/")[0] in ("demo", "plot") and key.startswith("cli/"):
                problems.append(f"{where} includes {included}: the program's code is above the figures and the demo")
    return problems


def python_problems():
    problems = []
    nn = ROOT / "python" / "posenc" / "nn.py"
    text = nn.read_text()
    where = nn.relative_to(ROOT)
    if re.search(r"load_library", text):
        problems.append(f"{where}: loads a library (python/posenc/__init__.py does)")
    if re.search(r"^\s*(from\s+(\.|posenc)|import\s+posenc)", text, flags=re.M):
        problems.append(f"{where}: imports posenc's own modules (it is the top of the package)")
    for alias in set(re.findall(r"^(\w+)\s*=\s*torch\.ops\.posenc\s*$", text, flags=re.M)) | {"torch.ops.posenc"}:
        for name in re.findall(re.escape(alias) + r"\.(\w+)", text):
            if name.startswith("_"):
                problems.append(f"{where}: calls the private operator {name}")
    for source in [ROOT / "python" / "posenc" / "onnx.py",
                   *sorted((ROOT / "python" / "posenc" / "integrations").glob("*.py"))]:
        body = source.read_text()
        here = source.relative_to(ROOT)
        if re.search(r"load_library", body):
            problems.append(f"{here}: loads a library (python/posenc/__init__.py does)")
        for name in re.findall(r"torch\.ops\.posenc\.(\w+)", body):
            if name.startswith("_"):
                problems.append(f"{here}: calls the private operator {name}")
    for source in [nn, ROOT / "python" / "posenc" / "__init__.py"]:
        if re.search(r"^\s*(from\s+(\.|posenc)\S*\s+import\s+.*integrations|import\s+posenc\.integrations|from\s+\.?integrations)",
                     source.read_text(), flags=re.M):
            problems.append(f"{source.relative_to(ROOT)}: imports posenc.integrations (opt-in, imported by its users)")
        if re.search(r"^\s*(from\s+(\.|posenc)\S*\s+import\s+.*\bonnx\b|import\s+posenc\.onnx|from\s+\.?onnx\b)",
                     source.read_text(), flags=re.M):
            problems.append(f"{source.relative_to(ROOT)}: imports posenc.onnx (opt-in: it needs onnxscript)")
    init = ROOT / "python" / "posenc" / "__init__.py"
    imports = [m for m in re.finditer(r"^(?:from\s+\.\s+import|import)\s+(\w+)", init.read_text(), flags=re.M)]
    package = [m.group(1) for m in imports if m.group(0).startswith("from")]
    if package not in (["nn"], ["distributed", "nn"]) or imports[-1].group(0).split()[-1] != "nn":
        problems.append(f"{init.relative_to(ROOT)}: imports {package} (distributed, then only nn, last, as the umbrella)")
    distributed = ROOT / "python" / "posenc" / "distributed.py"
    body = distributed.read_text()
    if re.search(r"load_library", body):
        problems.append(f"{distributed.relative_to(ROOT)}: loads a library (python/posenc/__init__.py does)")
    if re.search(r"^\s*(from\s+(\.|posenc)|import\s+posenc)", body, flags=re.M):
        problems.append(f"{distributed.relative_to(ROOT)}: imports posenc's own modules (it is the operators' layer, below nn)")
    for source in sorted((ROOT / "src" / "export" / "torchscript").glob("*.py")):
        body = source.read_text()
        if "torch.ops" in body:
            problems.append(f"{source.relative_to(ROOT)}: names torch.ops (exports run without posenc)")
        for module in re.findall(r"^\s*(?:import|from)\s+([\w.]+)", body, flags=re.M):
            if module.split(".")[0] not in ("torch", "typing", "math"):
                problems.append(f"{source.relative_to(ROOT)}: imports {module} (exports run in plain PyTorch)")
    return problems


def main():
    problems = cpp_problems() + python_problems()
    for problem in problems:
        print(problem)
    print(f"{len(problems)} against the layering")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
