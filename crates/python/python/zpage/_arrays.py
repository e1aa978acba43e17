"""NumPy arrays and large Python buffers in compressed memory:
``with zpage.budget("1G"): ...``."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional, Union

from ._errors import ConfigError, NumpyHookError
from ._zpage import (
    ArrayAllocator,
    Budget,
    enter_python_objects,
    exit_python_objects,
    make_numpy_handler,
    pin_memory,
    set_numpy_handler,
    unpin_memory,
)
from ._zpage import owns as _owns

__all__ = ["ArrayBudget", "budget", "owns", "resident"]

#: Arrays and buffers smaller than this go to NumPy's or Python's allocator.
DEFAULT_MIN_BYTES = 256 * 1024
#: Address space of one arena region carved into arrays.
DEFAULT_ARENA_BYTES = 256 * 1024 * 1024


def _numpy_api() -> Any:
    """NumPy's C-API capsule (numpy 2 moved it to numpy._core)."""
    try:
        import numpy  # noqa: F401
    except ImportError as e:
        raise NumpyHookError(
            "zpage.budget() puts NumPy arrays in compressed memory: install numpy (>= 1.22)"
        ) from e
    try:
        from numpy._core import _multiarray_umath as multiarray  # type: ignore[attr-defined]
    except ImportError:
        from numpy.core import _multiarray_umath as multiarray  # type: ignore[no-redef]
    return multiarray._ARRAY_API


class ArrayBudget:
    """The budget of a ``with zpage.budget(...)`` block: its
    :class:`Budget`, and the allocator that carves arrays and buffers from
    its regions. It stays alive while arrays and buffers made in the block do."""

    def __init__(self, shared: Budget, allocator: Any, handler: Any) -> None:
        self.budget = shared
        self._allocator = allocator
        self._handler = handler

    def stats(self) -> Dict[str, Any]:
        """Figures: ``arena_count``, ``arena_bytes`` (address space),
        ``carved_bytes`` (live arrays and buffers, whole pages),
        ``live_arrays``, ``live_buffers`` (``bytes``, ``bytearray`` and other
        Python objects' memory), ``carved_count``, ``fallback_count`` (small allocations passed to
        NumPy's allocator), ``failed_count`` and ``last_error``,
        ``budget_bytes``, ``resident_bytes``."""
        stats: Dict[str, Any] = self._allocator.stats()
        return stats

    def owns(self, array: Any) -> bool:
        """Whether the memory of ``array`` (an ndarray or a buffer such as
        ``bytes`` or ``bytearray``) was carved from this budget."""
        address, length = _extent(array)
        return bool(self._allocator.owns(address, length))

    def advise_cold(self, array: Any) -> None:
        """Compresses ``array``'s pages now (it will not be needed soon)."""
        address, length = _extent(array)
        self._allocator.advise_cold(address, length)

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"zpage.ArrayBudget({s['budget_bytes']} bytes, {s['live_arrays']} arrays, "
            f"{s['resident_bytes']} resident)"
        )


def _extent(array: Any) -> "tuple[int, int]":
    """Address and length of the memory under an ndarray (or buffer)."""
    try:
        interface = array.__array_interface__
        address = interface["data"][0]
        length = array.nbytes
    except AttributeError:
        import ctypes

        view = memoryview(array)
        length = view.nbytes
        if isinstance(array, bytes):
            # A bytes object's own buffer, not a copy.
            address = ctypes.cast(ctypes.c_char_p(array), ctypes.c_void_p).value or 0
        elif view.readonly:
            raise ConfigError(
                "zpage.resident() needs an ndarray, bytes or writable memory (a bytearray or a region)"
            )
        else:
            address = ctypes.addressof(ctypes.c_char.from_buffer(view))
    return address, length


def owns(obj: Any) -> bool:
    """Whether the memory of ``obj`` (an ndarray, ``bytes``, ``bytearray`` or
    other buffer) is compressed memory of a live :func:`budget` block."""
    address, length = _extent(obj)
    return bool(_owns(address, length))


@contextlib.contextmanager
def budget(
    size: Union[int, str],
    codec: Optional[str] = None,
    *,
    min_bytes: int = DEFAULT_MIN_BYTES,
    arena_bytes: int = DEFAULT_ARENA_BYTES,
    python_objects: bool = False,
    **options: Any,
) -> Iterator[ArrayBudget]:
    """Puts NumPy arrays and large Python buffers created in the block in
    compressed memory.

    ``with zpage.budget("1G"): a = numpy.zeros(...)``: every array of at
    least ``min_bytes`` created in the block (by this thread's context) is
    carved from regions drawing on one budget of ``size`` bytes; pages beyond
    it are compressed (``codec``, LZ4 by default). Outside code sees plain
    ndarrays. Smaller arrays use NumPy's allocator. Arrays outlive the block
    and stay valid; freeing them returns their memory. ``options`` are those
    of :class:`Budget` (``pool``, ``fault_mode``, ``keep_clean_copies``,
    ``aging``, ``cold_codec``, ``cold_by_age_only``).

    Uses NumPy's allocator hook (NEP 49, NumPy >= 1.22), which is per
    context: threads started in the block use NumPy's allocator unless they
    enter a block of their own. Covered: NumPy arrays (and pandas columns
    backed by them).

    With ``python_objects=True``, the memory of Python objects of at least
    ``min_bytes`` made in the block by this thread is carved too:
    ``bytes``, ``bytearray`` (also one grown past ``min_bytes`` in the
    block), ``str`` and the item arrays of large lists and dicts -- whatever
    CPython takes from its raw memory domain, which zpage wraps from the
    first such block on. It follows the thread, not the context: a
    coroutine suspended inside the block leaves it active for the others the
    thread runs. Not covered: smaller objects (CPython's own allocator), and
    memory of C libraries that call ``malloc`` themselves. Off by default:
    once installed, the hook adds a check to every raw allocation of the
    process, in or out of a block (measured within noise on mixed code, and
    possibly about 10% on a loop doing nothing but allocate 600-byte
    buffers; ``bench/raw_hook_overhead.py``).

    System calls on such arrays (``numpy.save``/``tofile``/``socket.send``)
    work in every fault mode: the wrappers zpage installs at import pin what
    each call touches. Calls those wrappers do not see (ctypes, raw system
    calls) raise ``OSError`` (EFAULT) rather than write wrong bytes; wrap
    them in ``with zpage.resident(array):``.
    """
    api = _numpy_api()
    shared = Budget(size, codec, **options)
    allocator = ArrayAllocator(shared, min_bytes, arena_bytes)
    handler = make_numpy_handler(api, allocator)
    state = ArrayBudget(shared, allocator, handler)
    previous = set_numpy_handler(api, handler)
    previous_block = enter_python_objects(allocator) if python_objects else None
    try:
        yield state
    finally:
        if previous_block is not None:
            exit_python_objects(allocator, previous_block)
        set_numpy_handler(api, previous)


@contextlib.contextmanager
def resident(array: Any) -> Iterator[Any]:
    """Keeps ``array``'s pages uncompressed for the block, so system calls
    (``numpy.save``, ``tofile``, ``socket.sendall``) can read and write it in
    the default "sigbus" fault mode. The array must come from a
    :func:`budget` block; at most half the budget may be pinned at once (a
    larger array raises :class:`PinError`: save it in slices).
    For arrays viewing a :class:`Region`, use ``Region.pin``/``unpin``."""
    address, length = _extent(array)
    pin_memory(address, length)
    try:
        yield array
    finally:
        unpin_memory(address, length)
