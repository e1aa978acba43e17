"""NumPy arrays and large Python buffers in compressed memory:
``with zpage.budget("1G"): ...``."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from typing import Any, Dict, Iterator, Optional, Union

from ._errors import ConfigError, NumpyHookError, UnavailableError
from ._zpage import (
    ArrayAllocator,
    Budget,
    carve_every_size,
    enter_python_objects,
    exit_python_objects,
    make_numpy_handler,
    pin_memory,
    set_numpy_handler,
    unpin_memory,
)
from ._zpage import owns as _owns

__all__ = ["ArrayBudget", "budget", "compress", "owns", "resident"]

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


#: The block the current context is in (``None`` outside any): what
#: threads started here inherit.
_ACTIVE_BLOCK: "contextvars.ContextVar[Optional[ArrayBudget]]" = contextvars.ContextVar(
    "zpage_active_budget", default=None
)


class ArrayBudget:
    """A budget for NumPy arrays (and, with ``python_objects=True``, large
    Python buffers): a :class:`Budget` and the allocator that carves arrays
    from its regions.

    ``zpage.budget(size, ...)`` makes one for a ``with`` block; made
    directly (``b = zpage.ArrayBudget("1G")``) it is entered with ``with
    b:`` as often as wanted, and given to :func:`compress`. It stays alive
    while arrays and buffers made in it do. ``size`` is bytes, a size such as
    ``"1G"``, a share of the machine's memory such as ``"25%"``, or
    ``"auto"`` (``"auto:0.5%"``): a budget that finds itself, shrinking while
    the time lost to restores and waits stays under the stall target (1% of
    wall time by default), at most a quarter of the machine's memory; the
    other arguments are those of :func:`budget`."""

    def __init__(
        self,
        size: Union[int, str],
        codec: Optional[str] = None,
        *,
        min_bytes: int = DEFAULT_MIN_BYTES,
        arena_bytes: int = DEFAULT_ARENA_BYTES,
        python_objects: bool = False,
        **options: Any,
    ) -> None:
        api = _numpy_api()
        self.budget = Budget(size, codec, **options)
        self._allocator = ArrayAllocator(self.budget, min_bytes, arena_bytes)
        self._handler = make_numpy_handler(api, self._allocator)
        self._python_objects = python_objects
        # Per thread: each thread leaves the blocks it entered.
        self._entered = threading.local()

    @contextlib.contextmanager
    def _active(self) -> Iterator["ArrayBudget"]:
        """This context (and threads started in it) allocates from the budget."""
        api = _numpy_api()
        previous = set_numpy_handler(api, self._handler)
        outer = _ACTIVE_BLOCK.get()
        _ACTIVE_BLOCK.set(self)
        previous_block = enter_python_objects(self._allocator) if self._python_objects else None
        try:
            yield self
        finally:
            if previous_block is not None:
                exit_python_objects(self._allocator, previous_block)
            _ACTIVE_BLOCK.set(outer)
            set_numpy_handler(api, previous)

    def __enter__(self) -> "ArrayBudget":
        _install_thread_hook()
        block = self._active()
        block.__enter__()
        stack = self._entered.__dict__.setdefault("stack", [])
        stack.append(block)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._entered.stack.pop().__exit__(*exc)

    def stats(self) -> Dict[str, Any]:
        """Figures of the allocator and of the budget's compression.

        The allocator: ``arena_count``, ``arena_bytes`` (address space),
        ``carved_bytes`` (live arrays and buffers, whole pages),
        ``live_arrays``, ``live_buffers`` (``bytes``, ``bytearray`` and
        other Python objects' memory), ``carved_count``, ``fallback_count``
        (small allocations passed to NumPy's allocator), ``failed_count``
        and ``last_error``, ``budget_bytes``, ``resident_bytes``.

        The compression, for every page of the budget held compressed in
        memory (as blosc2 reports a ratio per array): ``compressed_pages``,
        ``uncompressed_bytes`` (their size), ``compressed_bytes`` (their
        compressed blobs), ``pool_bytes`` (the memory the compressed pool
        takes for them, what the budget really costs beside
        ``resident_bytes``), ``ratio`` (``uncompressed_bytes / pool_bytes``;
        ``None`` before anything is compressed), ``raw_pages`` and
        ``raw_bytes`` (pages that did not compress and are held at their full
        4 KiB: random-looking float64 data does this), ``same_filled_pages``,
        ``written_back_pages`` (in a tier below RAM), ``helps`` (``False``
        when the ratio is 1.1 or less: the budget saves almost nothing) and
        ``summary``, one plain sentence that says how well the budget
        compresses, or that it cannot help."""
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
        ratio = "-" if s["ratio"] is None else f"{s['ratio']:.2f}:1"
        return (
            f"zpage.ArrayBudget({s['budget_bytes']} bytes, {s['live_arrays']} arrays, "
            f"{s['resident_bytes']} resident, ratio {ratio})"
        )


_thread_hook_lock = threading.Lock()
_thread_hook_installed = False


def _install_thread_hook() -> None:
    """Makes threads started inside a block allocate from it, for their
    whole run: ``threading.Thread.start`` (which ``concurrent.futures``
    and most libraries use) is wrapped, once per process, to run the new
    thread's ``run`` inside the block the starting context is in. NumPy's
    allocator hook is per context, and a new thread starts in an empty one."""
    global _thread_hook_installed
    with _thread_hook_lock:
        if _thread_hook_installed:
            return
        original_start = threading.Thread.start

        @functools.wraps(original_start)
        def start(self: threading.Thread, *args: Any, **kwargs: Any) -> Any:
            block = _ACTIVE_BLOCK.get()
            if block is not None and "_zpage_block" not in self.__dict__:
                run = self.run

                def run_in_block() -> None:
                    with block._active():
                        run()

                self._zpage_block = block  # type: ignore[attr-defined]
                self.run = run_in_block  # type: ignore[method-assign]
            return original_start(self, *args, **kwargs)

        threading.Thread.start = start  # type: ignore[method-assign]
        _thread_hook_installed = True


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
    of :class:`Budget`: the budget options of ``zpage run`` (``pool``,
    ``fault_mode``, ``cold_codec``, ``max_pool_bytes`` with ``backing``,
    ...).

    Uses NumPy's allocator hook (NEP 49, NumPy >= 1.22), which is per
    context. Threads started in the block (``threading.Thread``,
    ``concurrent.futures.ThreadPoolExecutor`` workers started by a
    ``submit`` in the block) allocate from it too, for their whole run, even
    after the block ends: zpage wraps ``threading.Thread.start`` at the
    first block. Threads that were running before the block (a pool made
    earlier) and threads made without ``threading`` use NumPy's allocator.
    Covered: NumPy arrays (and pandas columns backed by them). Existing
    arrays move in with :func:`compress`.

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
    state = ArrayBudget(
        size,
        codec,
        min_bytes=min_bytes,
        arena_bytes=arena_bytes,
        python_objects=python_objects,
        **options,
    )
    with state:
        yield state


def compress(
    data: Any,
    budget: Union[ArrayBudget, int, str],
    codec: Optional[str] = None,
    **options: Any,
) -> Any:
    """Moves existing data under a budget: returns an equal copy whose memory
    is compressed region memory, and leaves ``data`` as it was (drop it to
    free its memory).

    ``data`` is a NumPy array (the copy is a plain C- or Fortran-ordered
    ``numpy.ndarray`` of the same shape, dtype and values, whatever its
    size) or a pandas ``DataFrame``, ``Series`` or ``Index`` (a deep copy:
    its columns backed by NumPy arrays of at least the budget's
    ``min_bytes`` move; Arrow-backed columns and Python objects do not).
    ``budget`` is an :class:`ArrayBudget` (``b = zpage.ArrayBudget("1G")``,
    or the one a ``with zpage.budget(...) as b`` block gave) to share, or a
    size (``"1G"``, ``"25%"``) for a budget of its own, made with ``codec``
    and ``options`` as :class:`ArrayBudget` takes them and alive as long as
    the copy.

    Raises :class:`UnavailableError` when the budget cannot give memory (in
    a process forked from the one that made it, or past the process's
    region limit), naming why.
    """
    if isinstance(budget, ArrayBudget):
        if codec is not None or options:
            raise ConfigError(
                "codec and budget options belong to the ArrayBudget: give them to "
                "zpage.ArrayBudget(...), or pass a size to compress() for a budget of its own"
            )
        target = budget
    else:
        target = ArrayBudget(budget, codec, **options)
    import numpy

    before = target.stats()["failed_count"]
    with target._active():
        if isinstance(data, numpy.ndarray):
            previous = carve_every_size(True)
            try:
                copy = numpy.empty_like(data, order="K", subok=False)
            finally:
                carve_every_size(previous)
            numpy.copyto(copy, data, casting="no")
            moved = [copy]
        elif hasattr(data, "copy") and type(data).__module__.startswith("pandas"):
            copy = data.copy(deep=True)
            moved = []
        else:
            raise ConfigError(
                f"zpage.compress() takes a numpy.ndarray or a pandas object, not {type(data).__name__}"
            )
    if any(not target.owns(array) for array in moved):
        stats = target.stats()
        why = stats["last_error"] if stats["failed_count"] > before else None
        raise UnavailableError(
            "zpage.compress(): the budget could not give memory for the copy"
            + (f": {why}" if why else " (a process forked from the one that made the budget cannot carve from it)")
        )
    return copy


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
