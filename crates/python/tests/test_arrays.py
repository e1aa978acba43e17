"""with zpage.budget(...): NumPy arrays in compressed memory (NEP 49 hook)."""

import gc
import os

import pytest

import zpage
from conftest import MiB, scale


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def handler_name(array):
    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:
        from numpy.core.multiarray import get_handler_name
    return get_handler_name(array)


def pattern(np, n, seed):
    return (np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(seed)


def test_arrays_inside_land_in_regions_and_are_plain_ndarrays(np):
    with zpage.budget("64M") as b:
        big = np.zeros(4 * MiB // 8)
        small = np.ones(16)
    assert type(big) is np.ndarray and big.base is None and big.flags.owndata
    assert b.owns(big), "a large array is carved from the budget's regions"
    assert not b.owns(small), "a small one stays with NumPy's allocator"
    after = np.zeros(4 * MiB // 8)
    assert not b.owns(after), "outside the block NumPy's allocator is back"
    stats = b.stats()
    assert stats["live_arrays"] == 1 and stats["carved_bytes"] == 4 * MiB
    assert handler_name(big) == "zpage"
    assert handler_name(after) == "default_allocator"


def test_data_several_times_the_budget_round_trips(np):
    n = scale() * 48 * MiB // 8
    with zpage.budget("8M") as b:
        arrays = [pattern(np, n // 4, seed) for seed in range(4)]
        total = sum(int(a[::4096].sum() % 1000003) for a in arrays)
    stats = b.stats()
    assert stats["live_arrays"] >= 4
    assert stats["resident_bytes"] <= 9 * MiB, stats
    assert b.budget.store_stats()["contents"]["stored_pages"] > 0
    for seed, a in enumerate(arrays):
        assert np.array_equal(a, pattern(np, n // 4, seed)), seed
    assert total == sum(int(a[::4096].sum() % 1000003) for a in arrays)


def test_arrays_outlive_the_block(np):
    with zpage.budget("4M") as b:
        kept = pattern(np, 16 * MiB // 8, 3)
    del b
    gc.collect()
    # The budget lives on in the array's allocator reference.
    kept += np.uint64(1)
    assert np.array_equal(kept, pattern(np, 16 * MiB // 8, 3) + np.uint64(1))


def test_frees_return_memory(np):
    with zpage.budget("256M") as b:
        before = rss_bytes()
        a = np.random.default_rng(1).integers(0, 2**63, size=64 * MiB // 8, dtype=np.int64)
        grown = rss_bytes() - before
        assert grown > 48 * MiB, grown
        del a
        gc.collect()
        assert rss_bytes() - before < 16 * MiB, "the freed array's pages were given back"
        # Compressed copies are dropped too.
        c = pattern(np, 64 * MiB // 8, 1)
        c[:] = 0
    with zpage.budget("8M") as b:
        d = pattern(np, 32 * MiB // 8, 2)
        assert b.budget.store_stats()["contents"]["stored_pages"] > 0
        del d
        gc.collect()
        assert b.budget.store_stats()["contents"]["stored_pages"] == 0
        assert b.stats()["carved_bytes"] == 0
        # The space is reused: a new array gets the freed extent, zero-filled.
        e = np.zeros(32 * MiB // 8, dtype=np.uint64)
        assert not e.any()
        assert b.stats()["arena_count"] == 1
    del c


def test_realloc_keeps_contents(np):
    with zpage.budget("16M") as b:
        a = pattern(np, MiB // 8, 7)
        a.resize(4 * MiB // 8, refcheck=False)
        assert b.owns(a)
        assert np.array_equal(a[: MiB // 8], pattern(np, MiB // 8, 7))
        assert not a[MiB // 8:].any()
        a.resize(MiB // 16, refcheck=False)
        assert np.array_equal(a, pattern(np, MiB // 16, 7))


def test_pandas_dataframe_on_compressed_arrays(np):
    pd = pytest.importorskip("pandas")
    n = 1_000_000
    with zpage.budget("8M") as b:
        frame = pd.DataFrame({"key": np.arange(n) % 97, "value": np.arange(n, dtype=np.float64)})
        grouped = frame.groupby("key")["value"].sum()
    assert b.stats()["carved_count"] > 0
    plain = pd.DataFrame({"key": np.arange(n) % 97, "value": np.arange(n, dtype=np.float64)})
    assert grouped.equals(plain.groupby("key")["value"].sum())


def test_budget_options_and_errors(np):
    with pytest.raises(zpage.ConfigError):
        with zpage.budget("1G", "nonsense"):
            pass
    with pytest.raises(zpage.ConfigError, match="min_bytes"):
        with zpage.budget("1G", min_bytes=0):
            pass
    # A failed block leaves NumPy's allocator in place.
    a = np.zeros(MiB)
    assert handler_name(a) == "default_allocator"


def _sum(array):
    return int(array.sum())


def _child_allocates(queue):
    import numpy

    big = numpy.ones(300 * MiB // 8)  # more than an arena: the parent's budget cannot serve it
    queue.put(float(big.sum()))


def test_multiprocessing_pickling_and_fork(np):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    n = 4 * MiB // 8
    with zpage.budget("8M") as b:
        a = np.arange(n, dtype=np.uint64)
        b.advise_cold(a)
        with ctx.Pool(2) as pool:
            # Slices are pickled to the workers; the whole array is inherited.
            assert pool.map(_sum, [a[: n // 2], a[n // 2 :]]) == [_sum(a[: n // 2]), _sum(a[n // 2 :])]
        queue = ctx.Queue()
        child = ctx.Process(target=_child_allocates, args=(queue,))
        child.start()
        assert queue.get(timeout=60) == 300 * MiB // 8
        child.join(60)
        assert child.exitcode == 0
    assert _sum(a) == n * (n - 1) // 2


def test_a_budget_with_a_tier_gives_plain_results_and_reads_the_tier(np, tmp_path):
    # The case: a NumPy job under a budget whose compressed pool is
    # capped, with a file below it, computes what it computes without zpage,
    # and the pages it needed again came back from the file.
    backing = tmp_path / "tier"
    n = 24 * MiB // 8

    def job():
        # Hash-like words: incompressible, so the pool's 1M cap is passed
        # early and most evicted pages go to the file.
        a = pattern(np, n, 11)
        sums = np.cumsum(a % np.uint64(1000003))
        return a, sums

    plain_a, plain_sums = job()
    # The file's bound is given: its default, the machine's memory, is
    # refused where the disk has less room than that free.
    with zpage.budget(
        "4M", max_pool_bytes="1M", backing=backing, backing_max_bytes="256M"
    ) as b:
        a, sums = job()
    assert b.owns(a) and b.owns(sums)
    assert backing.exists(), "the tier is the file given"
    # Reads every page again: most were written back by now.
    assert np.array_equal(a, plain_a) and np.array_equal(sums, plain_sums)
    store = b.budget.store_stats()
    tier = store["tier"]
    assert tier is not None, store
    assert tier["puts"] > 0, tier
    assert tier["gets"] > 0, "pages were read back from the file"
    del a, sums, b
    gc.collect()
    assert not backing.exists(), "the budget removes its file when it ends"
