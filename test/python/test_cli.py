"""The posenc program at its edges: numbers outside their meaning are rejected with a message and a
non-zero exit, and an output that cannot be written is an error message and a non-zero exit,
never an abort and never a truncated file."""

import os
import resource
import signal
import subprocess

import pytest


def run(program, *args):
    return subprocess.run([program, *map(str, args)], capture_output=True, text=True, timeout=300)


def assert_rejected(result, message):
    # An abort (SIGABRT, from an exception thrown out of a destructor) would give a negative code.
    assert result.returncode > 0, f"expected a failure, got {result.returncode}:\n{result.stdout}"
    assert message in result.stderr, result.stderr


def test_a_valid_table_prints(posenc_cli):
    result = run(posenc_cli, "table", "--max-len", 2, "--d-model", 4)
    assert result.returncode == 0 and result.stdout.startswith("tensor(")


REJECTED = {
    "table: zero width": (["table", "--max-len", 8, "--d-model", 0], "--d-model"),
    "table: negative length": (["table", "--max-len", -3, "--d-model", 4], "--max-len"),
    "table: negative offset": (["table", "--max-len", 3, "--d-model", 4, "--offset", -1], "--offset"),
    "table: negative base": (["table", "--max-len", 3, "--d-model", 4, "--base", -2], "--base"),
    "table: a base whose angles overflow": (["table", "--max-len", 3, "--d-model", 4, "--base", "1e-300"], "base must be finite and >= 5.2e-290"),
    "table: precision past 17": (["table", "--max-len", 3, "--d-model", 4, "--precision", 18], "--precision"),
    "demo: negative steps": (["demo", "--steps", -5, "--quiet", "--plots", ""], "--steps"),
    "demo: zero steps": (["demo", "--steps", 0, "--quiet", "--plots", ""], "--steps"),
    "demo: negative seed": (["demo", "--steps", 5, "--seed", -1, "--quiet", "--plots", ""], "--seed"),
    "export: negative length": (["export", "--max-len", -1, "--d-model", 8, "-o", "x.pt"], "--max-len"),
    "export: zero width": (["export", "--max-len", 4, "--d-model", 0, "-o", "x.pt"], "--d-model"),
    "export: negative rotary width": (["export", "--module", "rotary", "--max-len", 4, "--head-dim", 8, "--rotary-dim", -2, "-o", "x.pt"], "--rotary-dim"),
    "export: zero rotary width": (["export", "--module", "rotary", "--max-len", 4, "--head-dim", 8, "--rotary-dim", 0, "-o", "x.pt"], "--rotary-dim"),
    "export: negative head width": (["export", "--module", "rotary", "--max-len", 4, "--head-dim", -8, "-o", "x.pt"], "--head-dim"),
    "plot: one position": (["plot", "--max-len", 1, "--d-model", 8, "-o", "figures"], "--max-len"),
    "plot: negative width": (["plot", "--max-len", 8, "--d-model", 8, "--width", -10, "-o", "figures"], "--width"),
    "plot: negative height": (["plot", "--max-len", 8, "--d-model", 8, "--height", -10, "-o", "figures"], "--height"),
}


@pytest.mark.parametrize("case", REJECTED)
def test_numbers_outside_their_meaning_are_rejected(posenc_cli, tmp_path, case):
    args, message = REJECTED[case]
    os.chdir(tmp_path)
    result = run(posenc_cli, *args)
    assert_rejected(result, message)
    assert not os.listdir(tmp_path), "a rejected command wrote files"


def test_export_to_an_unwritable_path_fails_cleanly(posenc_cli, tmp_path):
    path = tmp_path / "missing" / "pe.pt"
    result = run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", path)
    assert_rejected(result, f"cannot open '{path}' for writing")


def with_file_size_limit(max_bytes):
    """A full disk, as the program sees it: writes past `max_bytes` fail (EFBIG; the signal that
    would otherwise end the process is ignored, as a full disk sends none)."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit


def test_export_to_a_full_disk_fails_cleanly(posenc_cli, tmp_path):
    path = tmp_path / "pe.pt"
    args = [posenc_cli, "export", "--max-len", "256", "--d-model", "64", "-o", str(path)]
    result = subprocess.run(args, capture_output=True, text=True, preexec_fn=with_file_size_limit(4096))
    assert_rejected(result, f"cannot write '{path}': File too large")
    assert not path.exists(), "a truncated file was left behind"


def test_printing_to_a_full_disk_fails_cleanly(posenc_cli, tmp_path):
    with open(tmp_path / "table.txt", "w") as output:
        result = subprocess.run(
            [posenc_cli, "table", "--max-len", "256", "--d-model", "64"], stdout=output, stderr=subprocess.PIPE, text=True, preexec_fn=with_file_size_limit(4096)
        )
    assert_rejected(result, "cannot write to standard output: File too large")


def test_plotting_to_a_full_disk_fails_cleanly(posenc_cli, tmp_path):
    args = [posenc_cli, "plot", "--max-len", "64", "--d-model", "64", "-o", str(tmp_path)]
    result = subprocess.run(args, capture_output=True, text=True, preexec_fn=with_file_size_limit(4096))
    assert_rejected(result, f"cannot write '{tmp_path}/positional_encoding.png': File too large")
    assert not (tmp_path / "positional_encoding.png").exists()


def test_a_failed_export_leaves_no_file(posenc_cli, tmp_path):
    """The module's own checks run before anything is written."""
    path = tmp_path / "pe.pt"
    result = run(posenc_cli, "export", "--module", "rotary", "--max-len", 8, "--head-dim", 7, "-o", path)
    assert result.returncode > 0 and not path.exists()
