"""What a NumPy/pandas user reaches for: moving an existing array under a
budget (zpage.compress), arrays made by threads started in a block, budgets
as a share of memory ("25%"), the budget's compression figures (and the
plain statement when it cannot help), and zpage.__version__."""

import concurrent.futures
import importlib.metadata
import threading

import pytest

import zpage
from conftest import MiB, scale


def mem_total_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def pattern(np, n, seed):
    return (np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(seed)


def test_compress_moves_an_existing_array_under_a_budget(np):
    n = scale() * 24 * MiB // 8
    original = pattern(np, n, 5).reshape(-1, 64)
    reference = original.copy()
    moved = zpage.compress(original, "4M")
    assert type(moved) is np.ndarray and moved.dtype == original.dtype
    assert moved.shape == original.shape
    assert zpage.owns(moved) and not zpage.owns(original)
    # Six times the budget: most of it was compressed and comes back exact.
    assert np.array_equal(moved, reference)
    assert np.array_equal(original, reference), "the source is left as it was"

    # Shared budget; any layout and size, a small array and a strided view included.
    shared = zpage.ArrayBudget("16M")
    fortran = np.asfortranarray(pattern(np, 256 * 1024, 9).reshape(512, 512))
    small = np.arange(10, dtype=np.int16)
    view = reference[::3, 5:40]
    for data in (fortran, small, view):
        copy = zpage.compress(data, shared)
        assert shared.owns(copy), data.shape
        assert copy.dtype == data.dtype and np.array_equal(copy, data)
    assert zpage.compress(fortran, shared).flags.f_contiguous
    del copy
    assert shared.stats()["live_arrays"] == 0, "copies not kept are freed"

    with pytest.raises(zpage.ConfigError, match="belong to the ArrayBudget"):
        zpage.compress(small, shared, "zstd")
    with pytest.raises(zpage.ConfigError, match="numpy.ndarray or a pandas object"):
        zpage.compress([1, 2, 3], shared)


def test_compress_moves_a_pandas_frame(np):
    pd = pytest.importorskip("pandas")
    n = 500_000
    frame = pd.DataFrame({"a": np.arange(n, dtype=np.int64), "b": np.arange(n) * 0.5})
    b = zpage.ArrayBudget("4M")
    moved = zpage.compress(frame, b)
    assert moved.equals(frame)
    assert b.owns(moved["a"].to_numpy()) and b.owns(moved["b"].to_numpy())
    assert not b.owns(frame["a"].to_numpy())


def test_threads_started_in_a_block_allocate_from_it(np):
    n = MiB // 8
    made = {}

    def make(name):
        made[name] = np.ones(n)

    def nested():
        inner = threading.Thread(target=make, args=("nested",))
        inner.start()
        inner.join()

    before = threading.Event()
    early = threading.Thread(target=lambda: (before.wait(60), make("started before")))
    early.start()
    with zpage.budget("64M") as b:
        t = threading.Thread(target=make, args=("thread",))
        t.start()
        t.join()
        t = threading.Thread(target=nested)
        t.start()
        t.join()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pool.submit(make, "pool").result()
        late = threading.Event()
        lingering = threading.Thread(target=lambda: (late.wait(60), make("after the block")))
        lingering.start()
        before.set()
        early.join(60)
    late.set()
    lingering.join(60)
    outside = threading.Thread(target=make, args=("outside",))
    outside.start()
    outside.join()
    for name in ("thread", "nested", "pool", "after the block"):
        assert b.owns(made[name]), name
    assert not zpage.owns(made["started before"])
    assert not zpage.owns(made["outside"])
    assert all(float(a.sum()) == n for a in made.values())


def test_budgets_as_a_share_of_memory(np):
    total = mem_total_bytes()
    page = zpage.PAGE_SIZE
    for text, share in (("25%", 0.25), ("12.5%", 0.125), (" 1 %", 0.01)):
        got = zpage.Budget(text).budget_bytes
        assert abs(got - int(total * share)) < page, (text, got)
    with zpage.budget("1%") as b:
        assert abs(b.stats()["budget_bytes"] - total // 100) < page
    region = zpage.Region((total // 100 // page + 16) * page, budget="1%")
    assert region.stats()["budget_bytes"] // page == total // 100 // page
    region.close()
    # The rule of zpage run --budget and the kernel config: up to 400%.
    for bad in ("500%", "0%", "many%"):
        with pytest.raises(zpage.ConfigError, match=r"\(0, 400\]"):
            zpage.Budget(bad)
    with pytest.raises(zpage.ConfigError):
        zpage.Region("25%", budget="1M")  # a region's size is a size, not a share


def test_a_budget_that_finds_itself(np):
    """zpage.budget("auto"): at most a quarter of memory, as zpage run's (a
    region's own budget at most its size), and lowered towards what the
    program holds while it stalls little."""
    import time

    quarter = mem_total_bytes() // 4
    assert abs(zpage.Budget("auto").budget_bytes - quarter) < 2 * zpage.PAGE_SIZE
    size = 256 * MiB
    region = zpage.Region(size, budget="auto")
    assert region.stats()["budget_bytes"] == size
    view = np.frombuffer(region, dtype=np.uint64)
    half = view[: view.size // 2]
    half[:] = pattern(np, half.size, 9)
    # The controller looks every 100 ms: with half the region written and
    # no stall, the budget comes down to what is resident and some headroom.
    deadline = time.monotonic() + 10
    while region.stats()["budget_bytes"] >= size and time.monotonic() < deadline:
        time.sleep(0.05)
    assert region.stats()["budget_bytes"] < size, region.stats()
    assert np.array_equal(half, pattern(np, half.size, 9))
    del view, half
    region.close()
    with zpage.budget("auto:0.5%") as b:
        assert b.budget.budget_bytes <= quarter
    for bad in ("auto:90%", "auto:", "automatic"):
        with pytest.raises(zpage.ConfigError, match="auto:STALL%"):
            zpage.Budget(bad)
    with pytest.raises(zpage.ConfigError, match="give it once"):
        zpage.Budget("auto", auto_budget_stall_ppm=5000)


def test_stats_report_compression_and_version(np):
    assert isinstance(zpage.__version__, str)
    assert zpage.__version__ == importlib.metadata.version("zpage")
    with zpage.budget("4M") as b:
        fresh = b.stats()
        assert fresh["ratio"] is None and fresh["summary"] == "nothing compressed yet"
        a = np.repeat(np.arange(scale() * 4 * MiB // 8, dtype=np.int64), 4)  # 32 MiB, compressible
        b.advise_cold(a)
    s = b.stats()
    assert s["compressed_pages"] > 0 and s["pool_bytes"] > 0
    assert 0 < s["compressed_bytes"] < s["uncompressed_bytes"]
    assert s["ratio"] == pytest.approx(s["uncompressed_bytes"] / s["pool_bytes"])
    assert s["ratio"] > 2 and s["helps"], s
    assert s["raw_bytes"] == s["raw_pages"] * zpage.PAGE_SIZE
    assert f"{s['ratio']:.2f}:1" in s["summary"], s["summary"]
    assert "ratio" in repr(b)
    assert int(a[-1]) == scale() * 4 * MiB // 8 - 1


def test_incompressible_float64_is_held_raw_and_the_stats_say_so(np):
    rng = np.random.default_rng(1)
    with zpage.budget("4M") as b:
        noise = rng.random(scale() * 16 * MiB // 8)  # random float64: no redundancy
        reference = noise.copy()
        b.advise_cold(noise)
    s = b.stats()
    assert s["raw_pages"] > 0.9 * s["compressed_pages"], s
    assert s["raw_bytes"] == s["raw_pages"] * zpage.PAGE_SIZE
    assert s["ratio"] <= 1.1 and not s["helps"], s
    assert s["summary"].startswith("this budget cannot help"), s["summary"]
    assert "held raw at full size" in s["summary"]
    assert np.array_equal(noise, reference)
