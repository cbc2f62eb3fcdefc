"""The posenc program at its edges: numbers outside their meaning are rejected with a message and a
non-zero exit, and an output that cannot be written is an error message and a non-zero exit,
never an abort and never a truncated file."""

import os
import resource
import signal
import struct
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
    "plot: 2-D width not a multiple of 4": (["plot", "--embed-dim", 6, "-o", "figures"], "--embed-dim: must be a multiple of 4, but got 6"),
    "plot: 2-D width zero": (["plot", "--embed-dim", 0, "-o", "figures"], "--embed-dim"),
    "plot: a channel past the width": (["plot", "--embed-dim", 16, "--channels", 3, 16, "-o", "figures"], "--channels: must be below --embed-dim (16), but got 16"),
    "plot: a negative channel": (["plot", "--channels", -1, "-o", "figures"], "--channels: must be an integer >= 0, but got -1"),
    "plot: too many channels": (["plot", "--embed-dim", 64, "--channels", *range(33), "-o", "figures"], "--channels: at most 32 channels (one panel each), but got 33"),
    "plot: empty grid": (["plot", "--grid", 0, "-o", "figures"], "--grid"),
    "plot: three grid sizes": (["plot", "--grid", 4, 4, 4, "-o", "figures"], "--grid: At Most 2 required but received 3"),
    "plot: zero interpolation scale": (["plot", "--interpolation-scale", 0, "-o", "figures"], "--interpolation-scale: must be a finite number > 0, but got 0"),
    "plot: zero base size": (["plot", "--base-size", 0, "-o", "figures"], "--base-size"),
    "plot: odd head width": (["plot", "--head-dim", 7, "-o", "figures"], "--head-dim: must be a multiple of 2, but got 7"),
    "plot: rope theta 1": (["plot", "--rope-theta", 1, "-o", "figures"], "--rope-theta: must be a finite number > 1, but got 1"),
    "plot: rope factor below 1": (["plot", "--rope-factor", 0.5, "-o", "figures"], "--rope-factor: must be a finite number >= 1, but got 0.5"),
    "plot: zero original length": (["plot", "--original-max-len", 0, "-o", "figures"], "--original-max-len"),
}


@pytest.mark.parametrize("case", REJECTED)
def test_numbers_outside_their_meaning_are_rejected(posenc_cli, tmp_path, case):
    args, message = REJECTED[case]
    os.chdir(tmp_path)
    result = run(posenc_cli, *args)
    assert_rejected(result, message)
    assert not os.listdir(tmp_path), "a rejected command wrote files"


def png_size(path):
    """(width, height) from a PNG's IHDR chunk."""
    with open(path, "rb") as handle:
        header = handle.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR", path
    return struct.unpack(">II", header[16:24])


def test_plot_writes_the_2d_table_and_the_rope_spectrum(posenc_cli, tmp_path):
    result = run(posenc_cli, "plot", "--max-len", 16, "--d-model", 16,
                 "--grid", 8, 12, "--embed-dim", 32, "--channels", 0, 9, 17, 30, 31,
                 "--interpolation-scale", 2, "--base-size", 8,
                 "--head-dim", 64, "--rope-theta", 10000, "--rope-factor", 4, "--original-max-len", 4096,
                 "-o", tmp_path / "figures")
    assert result.returncode == 0, result.stderr
    figures = tmp_path / "figures"
    assert sorted(os.listdir(figures)) == ["position_similarity.png", "positional_encoding.png",
                                           "rope_spectrum.png", "sincos_2d.png"]
    for name in os.listdir(figures):
        assert f"wrote {figures / name}" in result.stdout
    # Five panels: four a row, two rows.
    assert png_size(figures / "sincos_2d.png") == (4 * (180 + 50) + 130, 70 + 2 * (180 + 60) + 10)
    assert png_size(figures / "rope_spectrum.png") == (1000, 560)


def test_plot_default_channels_fill_two_rows(posenc_cli, tmp_path):
    result = run(posenc_cli, "plot", "--max-len", 8, "--d-model", 8, "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    assert png_size(tmp_path / "sincos_2d.png") == (4 * (180 + 50) + 130, 70 + 2 * (180 + 60) + 10)


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
