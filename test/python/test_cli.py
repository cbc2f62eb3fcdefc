"""The posenc program at its edges: numbers outside their meaning are rejected with a message and a
non-zero exit, and an output that cannot be written is an error message and a non-zero exit,
never an abort and never a truncated file."""

import os
import resource
import signal
import stat
import struct
import subprocess

import pytest
import torch


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
    assert_rejected(result, f"cannot write '{path}': cannot create a file in '{tmp_path}/missing' (No such file or directory)")


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


# --- writes that lose nothing (src/io/file_output.h) -------------------------------------------

def test_a_failed_write_leaves_the_file_that_was_there(posenc_cli, tmp_path):
    """Written to a temporary beside the target and renamed over it: a full disk (here a file-size
    limit) leaves the old file as it was, and no temporary behind."""
    path = tmp_path / "pe.pt"
    path.write_bytes(b"the previous export")
    path.chmod(0o640)
    args = [posenc_cli, "export", "--max-len", "256", "--d-model", "64", "-o", str(path)]
    result = subprocess.run(args, capture_output=True, text=True, preexec_fn=with_file_size_limit(4096))
    assert_rejected(result, f"cannot write '{path}': File too large; the file that was there is unchanged")
    assert path.read_bytes() == b"the previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pe.pt"], "a temporary file was left behind"
    # a successful export replaces it, keeping its permissions
    assert run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", path).returncode == 0
    assert path.read_bytes()[:2] == b"PK" and (path.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pe.pt"]


def test_targets_that_are_not_regular_files_are_written_in_place_and_never_removed(posenc_cli, tmp_path):
    if not (stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISCHR(os.stat("/dev/full").st_mode)):
        pytest.skip("this machine's /dev/null or /dev/full is not a device node")
    assert run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", "/dev/null").returncode == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    result = run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", "/dev/full")
    assert_rejected(result, "cannot write '/dev/full': No space left on device (it names a device or a descriptor, so it was written in place and left there)")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode), "the device node was removed"
    result = run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", tmp_path)
    assert_rejected(result, f"'{tmp_path}' is a directory; name a file in it")
    # a FIFO: written as a stream, read by the other end
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    assert run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", fifo).returncode == 0
    assert reader.communicate(timeout=60)[0][:2] == b"PK" and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_read_only_directory_is_a_clean_error(posenc_cli, tmp_path):
    # (sysfs: no file can be created there, not even by root)
    result = run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", "/sys/posenc_pe.pt")
    assert_rejected(result, "cannot write '/sys/posenc_pe.pt': cannot create a file in '/sys'")
    assert not os.path.exists("/sys/posenc_pe.pt")


def test_a_symbolic_link_keeps_pointing_at_the_new_file(posenc_cli, tmp_path):
    real = tmp_path / "real.pt"
    real.write_bytes(b"old")
    link = tmp_path / "link.pt"
    link.symlink_to(real)
    assert run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", link).returncode == 0
    assert link.is_symlink() and real.read_bytes()[:2] == b"PK"
    # a link to a file that does not exist yet (relative): the file is made where it points
    (tmp_path / "sub").mkdir()
    dangling = tmp_path / "dangling.pt"
    dangling.symlink_to("sub/new.pt")
    assert run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", dangling).returncode == 0
    assert dangling.is_symlink() and (tmp_path / "sub" / "new.pt").read_bytes()[:2] == b"PK"


def test_hard_links_and_redirected_streams_see_the_new_content(posenc_cli, tmp_path):
    """A file with other names is written in place (a rename would leave them the old content);
    /dev/stdout redirected to a file is the caller's stream, written as it is."""
    first = tmp_path / "a.pt"
    first.write_bytes(b"old")
    second = tmp_path / "b.pt"
    os.link(first, second)
    assert run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", first).returncode == 0
    assert second.read_bytes()[:2] == b"PK" and os.stat(first).st_ino == os.stat(second).st_ino
    with open(tmp_path / "out.pt", "wb") as out:
        result = subprocess.run([posenc_cli, "export", "--max-len", "8", "--d-model", "4", "-o", "/dev/stdout"],
                                stdout=out, stderr=subprocess.PIPE, timeout=300)
    assert result.returncode == 0, result.stderr
    # the report goes to standard error, since standard output is the file
    assert (tmp_path / "out.pt").read_bytes()[:2] == b"PK" and b"wrote /dev/stdout" in result.stderr
    assert torch.jit.load(str(tmp_path / "out.pt"))(torch.zeros(1, 3, 4)).shape == (1, 3, 4)


def test_a_private_file_stays_private(posenc_cli, tmp_path):
    path = tmp_path / "secret.pt"
    path.write_bytes(b"old")
    path.chmod(0o600)
    assert run(posenc_cli, "export", "--max-len", 8, "--d-model", 4, "-o", path).returncode == 0
    assert path.read_bytes()[:2] == b"PK" and (path.stat().st_mode & 0o777) == 0o600


def test_a_failed_export_leaves_no_file(posenc_cli, tmp_path):
    """The module's own checks run before anything is written."""
    path = tmp_path / "pe.pt"
    result = run(posenc_cli, "export", "--module", "rotary", "--max-len", 8, "--head-dim", 7, "-o", path)
    assert result.returncode > 0 and not path.exists()
