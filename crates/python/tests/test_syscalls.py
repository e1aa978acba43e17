"""System calls on compressed pages: they work, or raise; never wrong bytes."""

import errno
import os
import platform
import socket
import subprocess
import sys
import textwrap
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


def cold(region):
    region.advise_cold()
    assert region.stats()["resident_bytes"] < 4 * MiB


def test_sigbus_mode_syscalls_on_evicted_pages_work(np, tmp_path):
    # The default fault mode, every page evicted before each call: the
    # in-process wrappers pin what each call touches.
    region, array = evicted_region_array(np)
    want = expected(np, array.size)
    assert save_works_or_raises(np, tmp_path / "a.npy", array) == "worked"
    cold(region)
    with open(tmp_path / "b.bin", "wb") as f:
        array.tofile(f)
    cold(region)
    array.tofile(tmp_path / "b2.bin")
    assert (tmp_path / "b.bin").read_bytes() == want.tobytes()
    assert (tmp_path / "b2.bin").read_bytes() == want.tobytes()
    cold(region)
    assert send_works_or_raises(array) == "worked"
    cold(region)
    fd = os.open(tmp_path / "c.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        written = 0
        while written < array.nbytes:
            written += os.write(fd, memoryview(array).cast("B")[written:])
    finally:
        os.close(fd)
    assert (tmp_path / "c.bin").read_bytes() == want.tobytes()

    # The kernel writing into evicted pages: readinto (unbuffered and
    # buffered), os.readv, recv_into.
    for buffering in (0, -1):
        array[:] = 0
        cold(region)
        with open(tmp_path / "b.bin", "rb", buffering=buffering) as f:
            got = 0
            view = memoryview(array).cast("B")
            while got < array.nbytes:
                n = f.readinto(view[got:])
                assert n > 0
                got += n
        assert np.array_equal(array, want), f"readinto, buffering={buffering}"
    array[:] = 0
    cold(region)
    half = array.nbytes // 2
    view = memoryview(array).cast("B")
    fd = os.open(tmp_path / "b.bin", os.O_RDONLY)
    try:
        # Two iovecs of 1 MiB each (an iovec call is pinned whole, so each
        # stays under half the 4 MiB budget).
        assert os.readv(fd, [view[: MiB], view[half : half + MiB]]) == 2 * MiB
    finally:
        os.close(fd)
    assert np.array_equal(array[: MiB // 8], want[: MiB // 8])
    assert np.array_equal(array[half // 8 : (half + MiB) // 8], want[MiB // 8 : 2 * MiB // 8])
    array[:] = want
    data = np.arange(array.size, dtype=np.uint64)[::-1].copy()
    cold(region)
    ours, theirs = socket.socketpair()
    sender = threading.Thread(target=lambda: (ours.sendall(data), ours.close()))
    sender.start()
    got = 0
    while got < array.nbytes:
        n = theirs.recv_into(view[got:])
        assert n > 0
        got += n
    sender.join()
    theirs.close()
    assert np.array_equal(array, data)
    del view, array
    region.close()


def test_numpy_load_and_fromfile_into_budget_arrays(np, tmp_path):
    want = expected(np, 4 * MiB)  # 32 MiB, eight times the budget
    np.save(tmp_path / "big.npy", want)
    want.tofile(tmp_path / "big.bin")
    with zpage.budget("4M") as b:
        loaded = np.load(tmp_path / "big.npy")  # fread into the new array
        assert b.owns(loaded)
        raw = np.fromfile(tmp_path / "big.bin", dtype=np.uint64)
        assert b.owns(raw)
    assert np.array_equal(loaded, want)
    assert np.array_equal(raw, want)
    b.advise_cold(loaded)
    np.save(tmp_path / "again.npy", loaded)
    assert np.array_equal(np.load(tmp_path / "again.npy"), want)


def test_a_module_imported_after_zpage_is_covered(np):
    # _socket is an extension module; the wrapper of dlopen patches it as
    # the import loads it, after zpage and after the region was made.
    script = textwrap.dedent(
        """
        import sys
        import zpage
        assert "_socket" not in sys.modules, "zpage imported socket itself"
        import numpy as np
        region = zpage.Region(16 << 20, 4 << 20)
        array = np.frombuffer(region, dtype=np.uint64)
        array[:] = np.arange(array.size, dtype=np.uint64)
        region.advise_cold()
        import socket, threading
        ours, theirs = socket.socketpair()
        got = bytearray()
        reader = threading.Thread(target=lambda: [got.extend(d) for d in iter(lambda: theirs.recv(1 << 20), b"")])
        reader.start()
        ours.sendall(array)
        ours.close()
        reader.join()
        assert bytes(got) == np.arange(array.size, dtype=np.uint64).tobytes()
        print("ok", zpage._zpage.syscall_wrappers()["pinned_calls"])
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok ")
    assert int(out.stdout.split()[1]) > 0


def test_wrappers_off_by_environment_raise_never_corrupt(np, tmp_path):
    script = textwrap.dedent(
        f"""
        import zpage, numpy as np
        assert not zpage._zpage.syscall_wrappers()["enabled"]
        region = zpage.Region(16 << 20, 4 << 20)
        array = np.frombuffer(region, dtype=np.uint64)
        array[:] = np.arange(array.size, dtype=np.uint64)
        region.advise_cold()
        try:
            array.tofile({str(tmp_path / "off.bin")!r})
        except OSError:
            print("raised")
        """
    )
    env = dict(os.environ, ZPAGE_PYTHON_WRAP_SYSCALLS="0")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "raised"
    written = (tmp_path / "off.bin").read_bytes()
    assert written == expected(np, 2 * MiB).tobytes()[: len(written)]


def test_a_raw_system_call_is_not_covered_and_raises_never_corrupts(np, tmp_path):
    # ctypes reaches the C library through dlsym, not a GOT entry, and
    # syscall(SYS_write) names no buffer zpage knows: the kernel fails it
    # with EFAULT. It never writes wrong bytes.
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    region, array = evicted_region_array(np)
    SYS_write = 1 if platform.machine() == "x86_64" else 64
    fd = os.open(tmp_path / "raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        address = array.ctypes.data
        r = libc.syscall(ctypes.c_long(SYS_write), ctypes.c_long(fd), ctypes.c_void_p(address), ctypes.c_size_t(array.nbytes))
        error = ctypes.get_errno()
    finally:
        os.close(fd)
    written = (tmp_path / "raw.bin").read_bytes()
    assert written == expected(np, array.size).tobytes()[: len(written)]
    assert r == -1 and error == errno.EFAULT, (r, error)
    with pytest.raises(OSError) as raised:
        raise OSError(error, os.strerror(error))
    assert raised.value.errno == errno.EFAULT
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
    assert save_works_or_raises(np, tmp_path / "f.npy", a) == "worked"
    b.advise_cold(a)
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
        # memory (the wrapper of fread pins it).
        direct = np.load(path)
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


def _mappings():
    rows = []
    for line in open("/proc/self/maps"):
        parts = line.split()
        start, end = (int(x, 16) for x in parts[0].split("-"))
        rows.append((start, end, parts[1], parts[-1] if len(parts) > 5 else ""))
    return rows


def test_full_relro_library_entries_point_at_the_wrappers_and_stay_read_only():
    # A library linked with -z now -z relro (read-only GOT after loading):
    # its entries are patched through a page made writable for the store,
    # then read-only again.
    import shutil

    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) not installed")
    try:
        import ssl  # noqa: F401  (loads libssl and libcrypto on most builds)
    except ImportError:
        pass
    zpage.Region(MiB, MiB).close()  # a walk over what is loaded now
    maps = _mappings()
    own = [(s, e) for s, e, _, path in maps if path.endswith(os.path.basename(zpage._zpage.__file__))]
    assert own
    candidates = sorted({path for _, _, _, path in maps if path.startswith("/") and ".so" in path})
    for path in candidates:
        if "libc.so" in path or path.endswith(os.path.basename(zpage._zpage.__file__)):
            continue
        dynamic = subprocess.run([readelf, "-dW", path], capture_output=True, text=True).stdout
        bound_now = "BIND_NOW" in dynamic or any(
            "FLAGS_1" in line and " NOW" in line for line in dynamic.splitlines()
        )
        if not bound_now or "GNU_RELRO" not in subprocess.run([readelf, "-lW", path], capture_output=True, text=True).stdout:
            continue
        relocs = subprocess.run([readelf, "-rW", path], capture_output=True, text=True).stdout
        slots = [
            int(line.split()[0], 16)
            for line in relocs.splitlines()
            if "JUMP_SLOT" in line and line.split()[-3].split("@")[0] in ("read", "write", "fread", "fwrite")
        ]
        if not slots:
            continue
        base = min(s for s, _, _, p in maps if p == path)
        for offset in slots:
            value = ctypes_word(base + offset)
            assert any(s <= value < e for s, e in own), f"{path}+{offset:#x} -> {value:#x}, not a wrapper"
            page = [perms for s, e, perms, _ in maps if s <= base + offset < e]
            assert page and page[0].startswith("r-"), f"{path}: GOT page left {page}"
        return
    pytest.skip("no full-RELRO library calling read/write/fread/fwrite is loaded here")


def ctypes_word(address):
    import ctypes

    return ctypes.c_uint64.from_address(address).value
