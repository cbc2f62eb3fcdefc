"""README.md and docs/: the README stays a front door, every link leads somewhere, every code
block is compiled or run (test/tools/doc_snippets.py says how each block is tested)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "tools"))
import doc_snippets  # noqa: E402

BLOCKS = doc_snippets.all_blocks()


def test_the_readme_is_a_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("path", doc_snippets.documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_somewhere(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links or path.name in ("errors.md", "benchmarks.md") or path.parent.name == "docs"
    for link in links:
        if re.match(r"^[a-z]+://", link):
            continue
        file, _, anchor = link.partition("#")
        target = (path.parent / file).resolve() if file else path
        assert target.exists(), f"{path.relative_to(ROOT)}: link to {link}: no such file"
        if anchor:
            assert anchor in anchors(target), f"{path.relative_to(ROOT)}: link to {link}: no such heading"


def test_every_block_is_tested_in_a_known_way():
    languages = {block.language for block in BLOCKS}
    assert languages <= {"cpp", "python", "sh", "cmake", "text"}, languages
    assert all(block.language in ("cpp", "python") or not block.context for block in BLOCKS)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.excerpt], ids=lambda b: b.where)
def test_excerpts_are_the_files_they_quote(block):
    """An excerpt's lines (comments and spacing aside, `...` for what it leaves out) are lines of
    the file it names, in order."""
    def normal(line):
        return " ".join(re.split(r"\s//\s|\s#\s", " " + line + " ")[0].split())

    source = [normal(line) for line in (ROOT / block.excerpt).read_text().splitlines()]
    position = 0
    for line in map(normal, block.code.splitlines()):
        if not line or line == "...":
            continue
        assert line in source[position:], f"{block.where}: '{line}' is not in {block.excerpt} (after line {position})"
        position = source.index(line, position) + 1


def test_the_build_compiled_the_cpp_blocks_as_they_are():
    """The doc_snippets target (test/CMakeLists.txt) compiled the file this test regenerates."""
    compiled = os.environ.get("POSENC_DOC_SNIPPETS")
    if not compiled:
        pytest.skip("the C++ blocks are compiled by the LibTorch 2 build (POSENC_DOC_SNIPPETS unset)")
    expected = doc_snippets.translation_unit(doc_snippets.cpp_blocks())
    assert pathlib.Path(compiled).read_text() == expected, "rebuild: the docs changed since the build"
    assert len(doc_snippets.cpp_blocks()) >= 10


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "python"], ids=lambda b: b.where)
def test_python_blocks_run(block, posenc_ops, posenc_cli, test_tool, tmp_path):
    """Each Python block runs, after its context, in a fresh interpreter in an empty directory;
    `posenc_cli(...)` and `test_tool(...)` run the built programs there."""
    from conftest import TORCH_VERSION

    if block.requires_torch and TORCH_VERSION < block.requires_torch:
        pytest.skip(f"{block.where} needs torch >= {'.'.join(map(str, block.requires_torch))}")
    program = "\n".join([
        "import subprocess, sys, torch",
        f"sys.path.insert(0, {str(ROOT / 'python')!r})",
        "def _run(tool, *args):",
        "    subprocess.run([tool, *map(str, args)], check=True, capture_output=True)",
        f"posenc_cli = lambda *args: _run({posenc_cli!r}, *args)",
        f"test_tool = lambda *args: _run({os.environ['POSENC_TEST_TOOL']!r}, *args)",
        block.context,
        block.code,
    ])
    result = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{block.where}:\n{result.stderr}"


SCRIPTS = re.compile(r"(?<![\w/.])((?:scripts|examples|bench|test|fuzz|docs)/[\w./-]*\w)")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language in ("sh", "cmake")], ids=lambda b: b.where)
def test_command_blocks_name_what_exists(block, posenc_cli):
    """Shell and CMake blocks: the repository paths they name exist, and the posenc subcommands
    and options they use are the program's (each is checked with --help)."""
    for path in SCRIPTS.findall(block.code):
        if path.startswith("docs/") and path.endswith((".md", ".png", ".json")) and "bench" in block.code:
            continue  # written by scripts/bench.sh
        assert (ROOT / path).exists() or path.rstrip("/").endswith(("out", "DIR")), f"{block.where}: {path}"
    for line in block.code.splitlines():
        command = re.match(r"^(?:\S*/)?posenc (\w+)(.*)", line.split("  #")[0].strip())
        if not command:
            continue
        help_text = subprocess.run([posenc_cli, command.group(1), "--help"], capture_output=True, text=True)
        assert help_text.returncode == 0, f"{block.where}: posenc {command.group(1)}: {help_text.stderr}"
        for option in re.findall(r"(?<!\w)(--[a-z][\w-]*)", command.group(2)):
            assert option in help_text.stdout, f"{block.where}: posenc {command.group(1)} has no {option}"
