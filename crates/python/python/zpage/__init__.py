"""zpage: compressed memory for Python and NumPy.

Memory whose cold pages are compressed in user space, with a resident
budget: pages beyond it are compressed (LZ4 by default) and come back
transparently on the next access.

- :class:`Region` -- a block of compressed memory exported through the
  buffer protocol: ``memoryview(region)`` and ``numpy.frombuffer(region,
  dtype)`` are zero-copy, writable views.
- :class:`Budget` -- one resident limit shared by several regions.
- :func:`budget` -- ``with zpage.budget("1G"): a = numpy.zeros(...)``:
  NumPy arrays created in the block (and in threads started in it) live in
  compressed memory under one budget, and remain ordinary ndarrays; with
  ``python_objects=True`` so do large ``bytes`` and ``bytearray`` objects
  (:func:`owns` tells which objects are). Sizes may be shares of the
  machine's memory (``"25%"``), as ``zpage run --budget`` takes them.
- :func:`compress` -- ``a = zpage.compress(a, "1G")``: an existing array
  (or pandas object) moved under a budget: an equal copy in compressed
  memory.
- :class:`ArrayBudget` -- the budget of such arrays; ``stats()`` says how
  well they compress (``ratio``, ``pool_bytes``, ``raw_pages``) and, in
  ``summary``, when the budget cannot help (data that does not compress,
  such as random-looking float64, is held raw at full size).
- :func:`analyze` and :func:`kernel_status` -- the documents ``zpage analyze
  --json`` and ``zpage kernel status --json`` print, as Python objects.

Errors are :class:`ZpageError` subclasses carrying the library's message.

System calls and evicted pages: in the default "sigbus" fault mode the
kernel cannot fault compressed pages back in by itself. Importing zpage
installs wrappers of the C library's I/O functions (``read``, ``write``,
``send``, ``recv``, ``fread``, ``fwrite`` and the rest) in every loaded
library, and in libraries loaded later, that restore and pin the memory a
call touches for the call: ``numpy.save``/``load``, ``tofile``/``fromfile``,
``os.write``, ``readinto``, ``socket.sendall``/``recv_into`` work on
compressed arrays. Calls that reach the kernel another way (ctypes
functions, raw system calls, io_uring) fail with EFAULT (``OSError``);
nothing wrong is read or written. ``ZPAGE_PYTHON_WRAP_SYSCALLS=0`` at import
leaves the libraries alone; then pin the memory first (:meth:`Region.pin`,
:func:`resident`), copy through user space (:func:`save`, :func:`load`,
:func:`sendall`, :func:`chunks`), or use ``fault_mode="handler_thread"``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence, Union

from ._errors import (
    AnalyzeError,
    BusyError,
    ClosedError,
    ConfigError,
    NumpyHookError,
    PinError,
    SystemCallError,
    UnavailableError,
    ZpageError,
)
from ._arrays import ArrayBudget, budget, compress, owns, resident
from ._syscalls import chunks, load, save, sendall
from ._zpage import PAGE_SIZE, Budget, Region, __version__
from ._zpage import analyze as _analyze
from ._zpage import kernel_status as _kernel_status

__all__ = [
    "__version__",
    "PAGE_SIZE",
    "Budget",
    "Region",
    "ArrayBudget",
    "budget",
    "compress",
    "owns",
    "resident",
    "save",
    "load",
    "sendall",
    "chunks",
    "analyze",
    "kernel_status",
    "ZpageError",
    "ConfigError",
    "UnavailableError",
    "ClosedError",
    "BusyError",
    "PinError",
    "SystemCallError",
    "AnalyzeError",
    "NumpyHookError",
]


def analyze(
    path_or_pid: Union[int, str, "os.PathLike[str]"],
    codecs: Optional[Sequence[str]] = None,
    pools: Optional[Sequence[str]] = None,
    *,
    rounds: int = 3,
    max_pages: Optional[int] = None,
) -> Dict[str, Any]:
    """How well memory compresses, with which codec and pool.

    ``path_or_pid`` is a memory image (a raw dump of 4 KiB pages; str or
    os.PathLike) or a process ID (its resident private anonymous pages).
    ``codecs`` and ``pools`` are lists of names as the CLI spells them
    (``["lz4", "zstd:3"]``, ``["zsmalloc", "zbud"]``); by default all.
    ``rounds`` is how many times each page is decompressed for latency (0
    skips it); ``max_pages`` caps what is read of a process.

    Returns the document ``zpage analyze --json`` prints
    (docs/analyze-json.md) as dicts and lists. Raises :class:`AnalyzeError`
    when the memory cannot be read, :class:`ConfigError` for an unknown name.
    """
    return _analyze(path_or_pid, codecs, pools, rounds=rounds, max_pages=max_pages)


def kernel_status() -> Dict[str, Any]:
    """The kernel's compressed-memory state (zram devices, zswap, swap areas)
    as ``zpage kernel status --json`` prints it, as dicts and lists."""
    return _kernel_status()
