"""zpage.Region and zpage.Budget: buffer protocol, stats, page calls, lifetime."""

import gc
import subprocess
import pathlib

import pytest

import zpage
from conftest import MiB


def fill_pattern(np, view, seed):
    words = np.frombuffer(view, dtype=np.uint64)
    words[:] = np.arange(words.size, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(seed)
    return words


def test_memoryview_is_a_zero_copy_writable_view():
    with zpage.Region(4 * MiB, 2 * MiB) as region:
        view = memoryview(region)
        assert (view.nbytes, view.format, view.readonly, view.ndim) == (region.size, "B", False, 1)
        view[123] = 77
        again = memoryview(region)
        assert again[123] == 77, "a second view sees the first's write: same memory"
        assert region.exports == 2
        view.release()
        again.release()
        assert region.exports == 0


def test_numpy_frombuffer_is_zero_copy_and_survives_eviction(np):
    # The region is four times its budget: most pages are compressed and
    # come back on access with the same bytes.
    with zpage.Region(32 * MiB, 8 * MiB) as region:
        words = fill_pattern(np, region, 5)
        assert words.ctypes.data == region.address, "the array is the region's memory"
        stats = region.stats()
        assert stats["eviction_count"] > 0
        assert stats["resident_bytes"] <= 8 * MiB + 64 * 4096
        expected = np.arange(words.size, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(5)
        assert np.array_equal(words, expected)
        assert region.stats()["restore_count"] > 0
        del words


def test_stats_names_are_the_librarys():
    # The names come from the Rust list region_stat_fields!: compare with the
    # source, so a renamed or added field that the binding missed fails here.
    counters = pathlib.Path(__file__).resolve().parents[2] / "region" / "src" / "counters.rs"
    if not counters.exists():
        pytest.skip("run from a source checkout to compare with crates/region")
    import re

    text = counters.read_text()
    block = text[text.index("gauges {"): text.index("macro_rules! define_stats")]
    names = re.findall(r"^\s+([a-z0-9_]+),$", block, re.M)
    with zpage.Region(MiB, MiB) as region:
        stats = region.stats()
    assert names and set(names) <= set(stats), set(names) - set(stats)
    assert set(stats) - set(names) == {"fault_latency", "store"}
    assert isinstance(stats["store"], dict) and stats["fault_latency"]["count"] >= 0


def test_prefault_pin_unpin_advise(np):
    with zpage.Region(16 * MiB, 4 * MiB) as region:
        words = fill_pattern(np, region, 1)
        region.advise_cold(0, MiB)
        assert region.stats()["eager_compression_count"] > 0
        region.advise_willneed(0, MiB)
        region.prefault(0, MiB)
        region.pin(0, MiB)
        assert region.stats()["pinned_bytes"] == MiB
        # Pinned pages stay resident while the rest of the region churns.
        words[:] = words + np.uint64(1)
        assert region.stats()["pinned_bytes"] == MiB
        region.unpin(0, MiB)
        assert region.stats()["pinned_bytes"] == 0
        with pytest.raises(zpage.PinError, match="not pinned"):
            region.unpin(0, 4096)
        with pytest.raises(zpage.PinError, match="half the budget"):
            region.pin(0, 3 * MiB)
        with pytest.raises(zpage.ConfigError, match="outside the region"):
            region.prefault(15 * MiB, 2 * MiB)
        del words


def test_close_with_live_views_refuses_naming_them(np):
    region = zpage.Region(MiB, MiB)
    array = np.frombuffer(region, dtype=np.uint8)
    with pytest.raises(zpage.BusyError, match="1 buffer export"):
        region.close()
    array[0] = 1  # still valid
    del array
    gc.collect()
    region.close()
    assert region.closed
    region.close()  # twice is harmless
    with pytest.raises(zpage.ClosedError):
        memoryview(region)
    with pytest.raises(zpage.ClosedError):
        region.stats()


def test_leaving_with_block_keeps_views_valid_until_released(np):
    with zpage.Region(8 * MiB, 2 * MiB) as region:
        array = fill_pattern(np, region, 9)
    # The block is left, a view remains: the memory lives until it goes.
    assert not region.closed
    expected = np.arange(array.size, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(9)
    assert np.array_equal(array, expected)
    del array, expected
    gc.collect()
    assert region.closed
    with pytest.raises(zpage.ClosedError):
        memoryview(region)


def test_budget_shared_by_regions(np):
    shared = zpage.Budget("8M")
    regions = [zpage.Region(8 * MiB, shared) for _ in range(3)]
    arrays = [fill_pattern(np, r, i) for i, r in enumerate(regions)]
    # The limit is enforced by the reclaimer at watermarks: allow a few pages over.
    assert shared.resident_bytes <= 8 * MiB + 64 * 4096
    for i, a in enumerate(arrays):
        expected = np.arange(a.size, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(i)
        assert np.array_equal(a, expected)
    assert all(r.stats()["budget_bytes"] == 8 * MiB for r in regions)
    with pytest.raises(zpage.ConfigError, match="belong to the Budget"):
        zpage.Region(MiB, shared, "zstd")
    del arrays, a
    for r in regions:
        r.close()


def test_codec_and_options():
    with zpage.Region(MiB, MiB, "zstd:3", pool="zbud", aging="fifo") as region:
        memoryview(region)[:10] = b"0123456789"
        assert bytes(memoryview(region)[:10]) == b"0123456789"
    with pytest.raises(zpage.ConfigError):
        zpage.Region(MiB, MiB, "nonsense")
    with pytest.raises(zpage.ConfigError, match="fault_mode"):
        zpage.Region(MiB, MiB, fault_mode="sometimes")
    with pytest.raises(zpage.ConfigError, match="size"):
        zpage.Region("12 parsecs", MiB)
    with pytest.raises(zpage.ConfigError, match="budget"):
        zpage.Region(MiB)


def text_pages(np, view):
    # Repetitive words that zstd shrinks well, different on every page.
    words = np.frombuffer(view, dtype=np.uint64)
    words[:] = (np.arange(words.size, dtype=np.uint64) % np.uint64(97)) * np.uint64(0x0101010101)
    words[::512] = np.arange(0, words.size, 512, dtype=np.uint64)
    return words


@pytest.mark.parametrize("by_age_only", [False, True])
def test_a_cold_codec_compresses_pages_without_quick_reuse(np, by_age_only):
    with zpage.Region(8 * MiB, 2 * MiB, cold_codec="zstd", cold_by_age_only=by_age_only) as region:
        words = text_pages(np, region)
        expected = words.copy()
        region.advise_cold()
        stats = region.stats()
        if by_age_only:
            assert stats["cold_compression_count"] == 0, stats
            assert stats["compression_count"] > 1000, stats
        else:
            assert stats["cold_compression_count"] > 1000, stats
        assert np.array_equal(words, expected)
        del words


def test_cold_codec_mistakes_name_the_option():
    with pytest.raises(zpage.ConfigError, match="cold_codec"):
        zpage.Budget("4M", cold_codec="zstd:99x")
    with pytest.raises(zpage.ConfigError, match="cold_by_age_only needs a cold_codec"):
        zpage.Budget("4M", cold_by_age_only=True)
    budget = zpage.Budget("4M", cold_codec="zstd-dict")
    with pytest.raises(zpage.ConfigError, match="belong to the Budget"):
        zpage.Region("8M", budget, cold_codec="zstd")


def test_every_budget_option_is_a_keyword_and_mistakes_name_it(tmp_path):
    with pytest.raises(zpage.ConfigError, match='max_pool_bytes: "12Q" is not a size'):
        zpage.Budget("4M", max_pool_bytes="12Q")
    with pytest.raises(zpage.ConfigError, match='dedup: "on" is not true or false'):
        zpage.Budget("4M", dedup="on")
    with pytest.raises(zpage.ConfigError, match="without max_pool_bytes"):
        zpage.Budget("4M", backing=tmp_path / "tier")
    with pytest.raises(zpage.ConfigError, match="backing_ca_file: give FILE"):
        zpage.Budget("4M", backing_ca_file=3.5)
    with pytest.raises(TypeError, match="the budget options are fault_mode, codec"):
        zpage.Budget("4M", compression="zstd")
    # Sizes as ints or strings, paths as pathlib paths, None as the default.
    budget = zpage.Budget(
        "4M",
        "zstd",
        max_pool_bytes=2 * MiB,
        backing=tmp_path / "tier",
        backing_max_bytes="64M",
        dedup=True,
        cold_after_ms=500,
        cold_codec=None,
    )
    with zpage.Region(8 * MiB, budget) as region:
        memoryview(region)[:5] = b"tiers"
        assert bytes(memoryview(region)[:5]) == b"tiers"
    assert budget.store_stats()["contents"]["pool_memory_limit_bytes"] == 2 * MiB
    with pytest.raises(zpage.ConfigError, match="max_pool_bytes, backing belong to the Budget"):
        zpage.Region(MiB, budget, max_pool_bytes="1M", backing="/tmp/x")
