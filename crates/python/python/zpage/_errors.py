"""The exceptions zpage raises. Every one is a :class:`ZpageError`; most
also derive from the builtin they refine, so ``except ValueError`` still
catches a bad size."""

from __future__ import annotations

__all__ = [
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


class ZpageError(Exception):
    """Base class of every error zpage raises; the message is the library's
    and names the problem and the fix."""


class ConfigError(ZpageError, ValueError):
    """A value that cannot work: a size, a codec or pool name, a range
    outside the region, too many regions."""


class UnavailableError(ZpageError, OSError):
    """The kernel lacks what zpage needs (userfaultfd, UFFDIO_MOVE, the
    privilege a fault mode asks for)."""


class ClosedError(ZpageError, ValueError):
    """The region is closed, was unmapped behind zpage's back, or belongs to
    the parent process (after a fork, when its budget could not be handed to
    the child: a tier below RAM, or the handler-thread mode)."""


class BusyError(ZpageError, BufferError):
    """The region cannot be closed: views of it (memoryviews, NumPy arrays)
    are alive."""


class PinError(ZpageError, ValueError):
    """Pinning was refused: it would pin more than half the budget, or the
    range is not pinned."""


class SystemCallError(ZpageError, OSError):
    """A system call zpage made failed."""


class AnalyzeError(ZpageError, OSError):
    """The analyzer could not read the memory it was given (a missing image,
    a process that exited or may not be read)."""


class NumpyHookError(ZpageError, RuntimeError):
    """NumPy's allocator hook (NEP 49) is not available: NumPy >= 1.22 is
    needed, or the budget's hook was left in the wrong order."""
