"""Handing compressed memory to the kernel without the system-call wrappers.

In the default "sigbus" fault mode a page compressed by zpage is absent from
the page tables, and only a user-mode access brings it back. ``import zpage``
installs wrappers of the C library's I/O functions that pin what a call
touches, so ``numpy.save``, ``tofile``, ``socket.sendall``, ``readinto`` and
the like work (see the package docstring). Without them
(``ZPAGE_PYTHON_WRAP_SYSCALLS=0``), or for a call they do not see (ctypes,
raw system calls), the call fails with EFAULT and Python raises ``OSError``;
bytes written before the failure are correct, nothing wrong is ever written.

The functions here copy through a small user-space buffer instead (the copy
faults pages back in), so they work in every case. Alternatives:
``zpage.resident(array)`` / ``Region.pin`` for up to half the budget, or a
budget made with ``fault_mode="handler_thread"``, where the kernel waits for
zpage to restore the page and every system call works.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Iterator, Union

__all__ = ["chunks", "load", "save", "sendall"]

#: Bytes copied per system call.
CHUNK_BYTES = 1 << 20


def chunks(buffer: Any, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The bytes of ``buffer`` (an array, a region, any buffer), as copies of
    at most ``chunk_bytes``, safe to pass to any system call."""
    whole = memoryview(buffer)
    if not whole.c_contiguous:
        whole.release()
        raise ValueError("zpage.chunks() needs a C-contiguous buffer (use numpy.ascontiguousarray)")
    view = whole.cast("B")
    whole.release()
    try:
        for start in range(0, view.nbytes, chunk_bytes):
            yield view[start : start + chunk_bytes].tobytes()
    finally:
        view.release()


class _CopyingWriter:
    """A file-like object NumPy writes to with ``write`` (not ``tofile``),
    one user-space copy at a time."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    def write(self, data: Any) -> int:
        # NumPy hands over copies already (tobytes of each chunk), except for
        # the header; either way a copy here keeps the kernel off region memory.
        written = 0
        for piece in chunks(data):
            self._file.write(piece)
            written += len(piece)
        return written

    def flush(self) -> None:
        self._file.flush()


class _CopyingReader:
    """A file-like object NumPy reads with ``read`` (not ``readinto`` or
    ``fread`` into the array): the kernel writes into a bytes object, and
    NumPy copies it into the array in user space."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    def read(self, size: int = -1) -> bytes:
        return self._file.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True


def load(file: Union[str, "os.PathLike[str]", BinaryIO], **kwargs: Any) -> Any:
    """``numpy.load`` of a ``.npy`` file that works inside a
    :func:`zpage.budget` block in any fault mode (``numpy.load`` of a path
    there reads straight into the new array's compressed memory, which the
    kernel cannot fill in "sigbus" mode: it raises ``ValueError``, "could
    only read N elements"). ``kwargs`` are ``numpy.load``'s."""
    import numpy

    if hasattr(file, "read"):
        return numpy.load(_CopyingReader(file), **kwargs)  # type: ignore[arg-type]
    with open(file, "rb") as f:
        return numpy.load(_CopyingReader(f), **kwargs)  # type: ignore[arg-type]


def save(file: Union[str, "os.PathLike[str]", BinaryIO], array: Any, allow_pickle: bool = False) -> None:
    """``numpy.save`` that works on arrays with compressed pages in any fault
    mode: the data goes to the file through user-space copies of 1 MiB."""
    import numpy

    if hasattr(file, "write"):
        numpy.save(_CopyingWriter(file), array, allow_pickle=allow_pickle)  # type: ignore[arg-type]
        return
    path = str(file)
    if not path.endswith(".npy"):
        path += ".npy"
    with open(path, "wb") as f:
        numpy.save(_CopyingWriter(f), array, allow_pickle=allow_pickle)  # type: ignore[arg-type]


def sendall(sock: Any, buffer: Any) -> None:
    """``sock.sendall(buffer)`` that works on compressed memory in any fault
    mode (1 MiB user-space copies)."""
    for piece in chunks(buffer):
        sock.sendall(piece)


