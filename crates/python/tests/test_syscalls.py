"""System calls on compressed pages: they work, or raise; never wrong bytes."""

import socket
import threading

import numpy
import pytest

import zpage
from conftest import MiB


def evicted_region_array(np, fault_mode=None):
    options = {"fault_mode": fault_mode} if fault_mode else {}
    try:
        region = zpage.Region(16 * MiB, 4 * MiB, **options)
    except zpage.UnavailableError as e:
        pytest.skip(f"fault mode {fault_mode} unavailable here: {e}")
    array = np.frombuffer(region, dtype=np.uint64)
    array[:] = np.arange(array.size, dtype=np.uint64)
    region.advise_cold()
    assert region.stats()["resident_bytes"] < 4 * MiB
    return region, array


def expected(np, n):
    return np.arange(n, dtype=np.uint64)


def save_works_or_raises(np, path, array):
    """numpy.save: either the file holds the array, or OSError; never wrong bytes."""
    try:
        np.save(path, array)
    except OSError:
        return "raised"
    assert np.array_equal(np.load(path), expected(np, array.size))
    return "worked"


def send_works_or_raises(array):
    ours, theirs = socket.socketpair()
    received = bytearray()

    def read():
        while True:
            data = theirs.recv(1 << 20)
            if not data:
                return
            received.extend(data)

    reader = threading.Thread(target=read)
    reader.start()
    outcome = "worked"
    try:
        ours.sendall(array)
    except OSError:
        outcome = "raised"
    ours.close()
    reader.join()
    theirs.close()
    sent = array.tobytes()
    assert bytes(received) == sent[: len(received)], "every byte that arrived is right"
    if outcome == "worked":
        assert len(received) == len(sent)
    return outcome


def test_sigbus_mode_syscalls_on_evicted_pages_raise_never_corrupt(np, tmp_path):
    region, array = evicted_region_array(np)
    # Today (no in-process system-call interposition) the kernel cannot
    # restore the pages: each of these raises OSError (EFAULT).
    assert save_works_or_raises(np, tmp_path / "a.npy", array) == "raised"
    region.advise_cold()
    with pytest.raises(OSError):
        with open(tmp_path / "b.bin", "wb") as f:
            array.tofile(f)
    region.advise_cold()
    assert send_works_or_raises(array) == "raised"
    # The data is intact afterwards.
    assert np.array_equal(array, expected(np, array.size))
    del array
    region.close()


def test_copying_paths_work_in_sigbus_mode(np, tmp_path):
    region, array = evicted_region_array(np)
    zpage.save(tmp_path / "c.npy", array)
    assert np.array_equal(np.load(tmp_path / "c.npy"), expected(np, array.size))
    region.advise_cold()
    with open(tmp_path / "d.npy", "wb") as f:
        zpage.save(f, array)
    assert np.array_equal(np.load(tmp_path / "d.npy"), expected(np, array.size))
    region.advise_cold()
    ours, theirs = socket.socketpair()
    got = bytearray()
    reader = threading.Thread(target=lambda: [got.extend(d) for d in iter(lambda: theirs.recv(1 << 20), b"")])
    reader.start()
    zpage.sendall(ours, array)
    ours.close()
    reader.join()
    assert bytes(got) == array.tobytes()
    del array
    region.close()


def test_pinned_and_resident_ranges_go_to_syscalls(np, tmp_path):
    region, array = evicted_region_array(np)
    part = array[: MiB // 8]
    region.pin(0, MiB)
    np.save(tmp_path / "e.npy", part)
    region.unpin(0, MiB)
    assert np.array_equal(np.load(tmp_path / "e.npy"), expected(np, part.size))
    del array, part
    region.close()
    with zpage.budget("8M") as b:
        a = np.arange(MiB // 8 * 3, dtype=np.uint64)
        big = np.arange(MiB, dtype=np.uint64)
    b.advise_cold(a)
    assert save_works_or_raises(np, tmp_path / "f.npy", a) == "raised"
    with zpage.resident(a):
        np.save(tmp_path / "f.npy", a)
    assert np.array_equal(np.load(tmp_path / "f.npy"), expected(np, a.size))
    with pytest.raises(zpage.PinError, match="half the budget"):
        with zpage.resident(big):
            pass
    with pytest.raises(zpage.ConfigError, match="not in memory of a zpage.budget"):
        with zpage.resident(np.zeros(4)):
            pass


def test_handler_thread_mode_makes_syscalls_work(np, tmp_path):
    region, array = evicted_region_array(np, "handler_thread")
    assert region.fault_mode == "handler_thread"
    assert save_works_or_raises(np, tmp_path / "g.npy", array) == "worked"
    region.advise_cold()
    with open(tmp_path / "h.bin", "wb") as f:
        array.tofile(f)
    assert np.array_equal(np.fromfile(tmp_path / "h.bin", dtype=np.uint64), expected(np, array.size))
    region.advise_cold()
    assert send_works_or_raises(array) == "worked"
    # Reading from the kernel into evicted pages works too.
    region.advise_cold()
    with open(tmp_path / "h.bin", "rb") as f:
        array[:] = 0
        region.advise_cold()
        assert f.readinto(array) == array.nbytes
    assert np.array_equal(array, expected(np, array.size))
    del array
    region.close()


def test_handler_thread_budget_for_arrays(np, tmp_path):
    try:
        block = zpage.budget("4M", fault_mode="handler_thread")
        b = block.__enter__()
    except zpage.UnavailableError as e:
        pytest.skip(f"handler_thread unavailable: {e}")
    try:
        a = np.arange(2 * MiB, dtype=np.uint64)
    finally:
        block.__exit__(None, None, None)
    b.advise_cold(a)
    a.tofile(tmp_path / "i.bin")
    assert np.array_equal(np.fromfile(tmp_path / "i.bin", dtype=np.uint64), expected(np, a.size))


def test_loading_into_budget_arrays(np, tmp_path):
    path = tmp_path / "big.npy"
    np.save(path, expected(np, 4 * MiB // 8 * 4))
    with zpage.budget("8M") as b:
        # numpy.load of a path freads straight into the new array's region
        # memory: in "sigbus" mode that read fails; it raises, never returns
        # wrong bytes.
        try:
            direct = np.load(path)
        except (OSError, ValueError):
            direct = None
        if direct is not None:
            assert np.array_equal(direct, expected(np, direct.size))
        loaded = zpage.load(path)
        assert b.owns(loaded)
        with open(path, "rb") as f:
            again = zpage.load(f)
    assert np.array_equal(loaded, expected(np, loaded.size))
    assert np.array_equal(again, expected(np, again.size))


def test_mmap_copies(np):
    import mmap

    region, array = evicted_region_array(np)
    with mmap.mmap(-1, array.nbytes) as copy:
        copy[:] = memoryview(array).cast("B")  # a user-space copy: faults resolve
        assert np.array_equal(np.frombuffer(copy, dtype=np.uint64), expected(np, array.size))
        region.advise_cold()
        array[:] = 0
        memoryview(array).cast("B")[:] = copy[:]
        del copy
    assert np.array_equal(array, expected(np, array.size))
    del array
    region.close()
