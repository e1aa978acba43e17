"""with zpage.budget(...): large bytes and bytearray in compressed memory
(the hook on CPython's raw memory domain)."""

import gc
import hashlib
import os
import socket
import threading
import weakref

import zpage
from zpage import _zpage
from conftest import MiB

BIG = 64 * MiB


def source(np, nbytes, seed):
    """Bytes that compress a little but not to nothing, made outside any block."""
    words = (np.arange(nbytes // 8, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(seed % 7 + 40)
    return words.tobytes()


def digest(data):
    return hashlib.sha256(data).hexdigest()


def test_large_bytes_and_bytearray_land_in_regions_small_ones_do_not(np):
    src = source(np, BIG, 1)
    with zpage.budget("256M", python_objects=True) as b:
        before = b.stats()["carved_count"]
        small = [bytes(range(i % 200)) + b"%d" % i for i in range(20000)]
        medium = bytearray(1000)
        assert b.stats()["carved_count"] == before, "small objects stay with Python's allocator"
        array = bytearray(src)
        frozen = bytes(array)
    assert b.owns(array) and b.owns(frozen)
    assert zpage.owns(array) and zpage.owns(frozen)
    assert not zpage.owns(medium) and not any(zpage.owns(s) for s in small[:100])
    assert b.stats()["live_buffers"] == 2, b.stats()
    after = bytearray(src)
    assert not zpage.owns(after), "outside the block Python's allocator is back"
    assert array == src and frozen == src
    with zpage.budget("256M") as off:
        plain = bytearray(src)
    assert not zpage.owns(plain) and off.stats()["live_buffers"] == 0, "off by default"


def test_pages_are_evicted_and_read_back_exact(np):
    srcs = [source(np, BIG, seed) for seed in (2, 3)]
    with zpage.budget("8M", python_objects=True) as b:
        array = bytearray(srcs[0])
        frozen = bytes(memoryview(srcs[1]))  # bytes(bytes) is the same object
        assert b.stats()["resident_bytes"] <= 9 * MiB, b.stats()
        assert b.budget.store_stats()["contents"]["stored_pages"] > 0
    assert digest(array) == digest(srcs[0])
    assert digest(frozen) == digest(srcs[1])
    array[BIG // 2 : BIG // 2 + 5] = b"zpage"
    assert digest(array) == digest(srcs[0][: BIG // 2] + b"zpage" + srcs[0][BIG // 2 + 5 :])


def test_bytearray_grown_across_the_block_boundary_keeps_its_bytes(np):
    src = source(np, 16 * MiB, 4)
    with zpage.budget("8M", python_objects=True):
        carved = bytearray(src[:MiB])
        assert zpage.owns(carved)
        # Grown from a small start inside: moved into the arenas on the way.
        built = bytearray()
        for at in range(0, 8 * MiB, 64 * 1024):
            built += src[at : at + 64 * 1024]
        assert zpage.owns(built)
    # Grown after the block: moved to Python's allocator, bytes kept.
    carved += src[MiB:]
    assert carved == src and not zpage.owns(carved)
    built.extend(src[8 * MiB :])
    assert built == src
    # Grown into a block from outside it.
    outside = bytearray(src[:1000])
    with zpage.budget("8M", python_objects=True):
        outside.extend(src[1000 : 4 * MiB])
        assert zpage.owns(outside)
    assert outside == src[: 4 * MiB]
    # Shrunk in place and moved out when small.
    del outside[2 * MiB :]
    assert outside == src[: 2 * MiB]
    del outside[1000:]
    assert outside == src[:1000]


def test_objects_outlive_the_block_and_are_freed_later(np):
    src = source(np, 16 * MiB, 5)
    with zpage.budget("4M", python_objects=True) as b:
        kept = bytearray(src)
        kept_bytes = bytes(memoryview(src))
    assert b.stats()["live_buffers"] == 2
    block = weakref.ref(b)
    del b
    gc.collect()
    assert block() is None, "only the buffers keep the block's carver now"
    kept[:4] = b"head"
    assert kept[4:] == src[4:] and kept_bytes == src
    address, length = id(kept_bytes), len(kept_bytes)
    assert _zpage.owns(address, length)
    del kept, kept_bytes
    gc.collect()
    # The last free released the carver: its arenas are unmapped.
    assert not _zpage.owns(address, length)


def test_file_and_socketpair_in_the_default_fault_mode(np, tmp_path):
    src = source(np, 16 * MiB, 6)
    with zpage.budget("4M", python_objects=True) as b:
        data = bytes(memoryview(src))
        into = bytearray(len(src))
        assert b.owns(data) and b.owns(into)
        assert b.budget.store_stats()["contents"]["stored_pages"] > 0
    path = tmp_path / "data.bin"
    with open(path, "wb") as f:
        f.write(data)
    assert digest(path.read_bytes()) == digest(src)
    with open(path, "rb") as f:
        assert f.readinto(into) == len(src)
    assert digest(into) == digest(src)

    left, right = socket.socketpair()
    received = bytearray()

    def receive():
        while len(received) < len(src):
            chunk = right.recv(1 << 20)
            if not chunk:
                break
            received.extend(chunk)

    reader = threading.Thread(target=receive)
    reader.start()
    left.sendall(data)
    reader.join(60)
    left.close()
    right.close()
    assert digest(received) == digest(src)


def test_threads_started_in_the_block_are_in_it_and_others_are_not(np):
    src = source(np, 4 * MiB, 7)
    made = []
    go = threading.Event()

    def earlier():
        go.wait(60)
        made.append(("earlier", bytearray(src)))

    outside = threading.Thread(target=earlier)
    outside.start()  # before the block: not in it
    with zpage.budget("64M", python_objects=True):
        worker = threading.Thread(target=lambda: made.append(("inside", bytearray(src))))
        worker.start()
        worker.join()
        go.set()
        outside.join(60)
        mine = bytearray(src)
    found = dict(made)
    assert zpage.owns(mine) and zpage.owns(found["inside"]) and not zpage.owns(found["earlier"])
    assert found["inside"] == src and found["earlier"] == src


_INHERITED = None


def _child_reads(queue):
    fresh = bytearray(_INHERITED)
    queue.put((digest(_INHERITED), zpage.owns(fresh), fresh == _INHERITED))


def test_a_forked_child_reads_them(np):
    import multiprocessing

    global _INHERITED
    src = source(np, 16 * MiB, 8)
    ctx = multiprocessing.get_context("fork")
    with zpage.budget("4M", python_objects=True) as b:
        _INHERITED = bytes(memoryview(src))
        assert b.owns(_INHERITED)
        queue = ctx.Queue()
        child = ctx.Process(target=_child_reads, args=(queue,))
        child.start()
        # The child's own large objects come from Python's allocator.
        assert queue.get(timeout=60) == (digest(src), False, True)
        child.join(60)
        assert child.exitcode == 0
    assert _INHERITED == src
    _INHERITED = None
