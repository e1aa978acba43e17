"""Errors are ZpageError subclasses with the library's message; the analyzer
and kernel status as Python objects, the same documents the CLI prints."""

import json
import os
import subprocess
import sys

import pytest

import zpage
from conftest import MiB


def test_every_error_is_a_zpage_error_with_the_librarys_message():
    cases = [
        (lambda: zpage.Region(0, MiB), zpage.ConfigError, "size_bytes is 0"),
        (lambda: zpage.Region(MiB, 4096), zpage.ConfigError, r"below the smallest, 262144 bytes \(64 pages"),
        (lambda: zpage.Budget("1G", "lz5"), zpage.ConfigError, "lz5"),
        (lambda: zpage.Budget("1G", pool="heap"), zpage.ConfigError, "heap"),
        (lambda: zpage.Budget(-5), zpage.ConfigError, "-5"),
        (lambda: zpage.Budget([1]), zpage.ConfigError, "list"),
        (lambda: zpage.analyze("/nonexistent/image"), zpage.AnalyzeError, "cannot read memory image"),
        (lambda: zpage.analyze(2**31 - 2), zpage.AnalyzeError, "no process with PID"),
        (lambda: zpage.analyze(3.5), zpage.ConfigError, "float"),
        (lambda: zpage.analyze(os.getpid(), codecs=["lz9"]), zpage.ConfigError, "lz9"),
    ]
    for call, kind, words in cases:
        with pytest.raises(kind, match=words) as caught:
            call()
        assert isinstance(caught.value, zpage.ZpageError)
    # Refined builtins still catch them.
    with pytest.raises(ValueError):
        zpage.Region(0, MiB)
    with pytest.raises(OSError):
        zpage.analyze("/nonexistent/image")


def test_a_forked_child_uses_its_copy_of_a_region():
    # The child takes the region over: it reads the parent's bytes (evicted
    # ones included), can pin and write its copy, and the parent never sees
    # the child's writes.
    code = r"""
import os, sys, zpage
r = zpage.Region(8 << 20, 1 << 20)
m = memoryview(r)
for page in range(0, 8 << 20, 4096):
    m[page:page + 8] = page.to_bytes(8, "little")
m[:5] = b"hello"
pid = os.fork()
if pid == 0:
    ok = bytes(m[:5]) == b"hello" and all(
        int.from_bytes(m[page:page + 8], "little") == page for page in range(4096, 8 << 20, 4096))
    r.pin(0, 4096)
    m[:5] = b"child"
    r.unpin(0, 4096)
    os._exit(0 if ok else 4)
_, status = os.waitpid(pid, 0)
if os.WEXITSTATUS(status) != 0:
    sys.exit(os.WEXITSTATUS(status))
sys.exit(0 if bytes(m[:5]) == b"hello" else 5)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def memory_image(np, path, pages=256):
    words = (np.arange(pages * 512, dtype=np.uint64) % 1000) * np.uint64(3)
    words[::7] = np.arange(words[::7].size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    words.tofile(path)


SPEEDS = ("compress_mib_s", "pass_mib_s", "decompress_mib_s", "decompress_p50_ns", "decompress_p99_ns", "decompress_max_ns")


def without_speeds(document):
    for codec in document["codecs"]:
        for key in SPEEDS:
            codec.pop(key, None)
    return document


def test_analyze_an_image(np, tmp_path):
    image = tmp_path / "memory.img"
    memory_image(np, image)
    doc = zpage.analyze(image, codecs=["lz4", "zstd:3"], pools=["zsmalloc", "zbud"], rounds=1)
    assert doc["schema"].startswith("zpage-analyze/")
    assert doc["pages"] == 256 and doc["bytes"] == 256 * 4096
    assert [c["name"] for c in doc["codecs"]] == ["lz4", "zstd"]
    assert {p["name"] for p in doc["pools"]} == {"zsmalloc", "zbud"}
    assert all(1.0 < c["ratio"] for c in doc["codecs"])
    assert doc["codecs"][0]["decompress_p50_ns"] > 0


def test_analyze_matches_the_cli_json(np, tmp_path):
    cli = os.environ.get("ZPAGE_CLI")
    if not cli:
        pytest.skip("set ZPAGE_CLI to the zpage binary (scripts/test-python.sh does)")
    image = tmp_path / "memory.img"
    memory_image(np, image)
    ours = zpage.analyze(str(image), codecs=["lz4"], pools=["zsmalloc"], rounds=0)
    printed = subprocess.run(
        [cli, "analyze", str(image), "--codec", "lz4", "--pool", "zsmalloc", "--rounds", "0", "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    assert without_speeds(ours) == without_speeds(json.loads(printed))


def test_analyze_a_live_process(np):
    keep = np.tile(np.arange(4096, dtype=np.uint8), 2048)  # 8 MiB resident
    doc = zpage.analyze(os.getpid(), codecs=["lz4"], pools=["zsmalloc"], rounds=0, max_pages=4096)
    assert doc["sources"][0]["kind"] == "process"
    assert 0 < doc["pages"] <= 4096
    del keep


def test_kernel_status_matches_the_cli_json():
    status = zpage.kernel_status()
    assert {"zram", "zswap"} <= set(status)
    cli = os.environ.get("ZPAGE_CLI")
    if cli:
        printed = json.loads(
            subprocess.run([cli, "kernel", "status", "--json"], check=True, capture_output=True, text=True).stdout
        )
        assert set(printed) == set(status)
        assert [d["name"] for d in printed["zram"]] == [d["name"] for d in status["zram"]]
