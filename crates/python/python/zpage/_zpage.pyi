"""Type hints of the native module (zpage._zpage)."""

import os
from typing import Any, Dict, Optional, Sequence, Union

PAGE_SIZE: int
__version__: str

Size = Union[int, str]
Path = Union[str, "os.PathLike[str]"]

class Budget:
    """A resident budget shared by several regions."""

    def __init__(
        self,
        size: Size,
        codec: Optional[str] = None,
        *,
        # BEGIN GENERATED OPTIONS: do not edit (see crates/python/tests/stub.rs)
        fault_mode: Optional[str] = None,
        aging: Optional[str] = None,
        pool: Optional[str] = None,
        max_pool_bytes: Optional[Size] = None,
        keep_clean_copies: Optional[bool] = None,
        dedup: Optional[bool] = None,
        cold_codec: Optional[str] = None,
        cold_after_ms: Optional[int] = None,
        cold_by_age_only: Optional[bool] = None,
        backing: Optional[Path] = None,
        keep_backing: Optional[bool] = None,
        backing_max_bytes: Optional[Size] = None,
        backing_password_file: Optional[Path] = None,
        backing_ca_file: Optional[Path] = None,
        backing_cert_file: Optional[Path] = None,
        backing_key_file: Optional[Path] = None,
        memory_max_bytes: Optional[Size] = None,
        auto_budget_stall_ppm: Optional[int] = None,
        fault_trace: Optional[Path] = None,
        # END GENERATED OPTIONS
    ) -> None: ...
    @property
    def budget_bytes(self) -> int: ...
    @property
    def resident_bytes(self) -> int: ...
    def store_stats(self) -> Dict[str, Any]: ...

class RegionBase:
    def __init__(
        self,
        size: Size,
        budget: Union[Size, Budget, None] = None,
        codec: Optional[str] = None,
        *,
        # BEGIN GENERATED OPTIONS: do not edit (see crates/python/tests/stub.rs)
        fault_mode: Optional[str] = None,
        aging: Optional[str] = None,
        pool: Optional[str] = None,
        max_pool_bytes: Optional[Size] = None,
        keep_clean_copies: Optional[bool] = None,
        dedup: Optional[bool] = None,
        cold_codec: Optional[str] = None,
        cold_after_ms: Optional[int] = None,
        cold_by_age_only: Optional[bool] = None,
        backing: Optional[Path] = None,
        keep_backing: Optional[bool] = None,
        backing_max_bytes: Optional[Size] = None,
        backing_password_file: Optional[Path] = None,
        backing_ca_file: Optional[Path] = None,
        backing_cert_file: Optional[Path] = None,
        backing_key_file: Optional[Path] = None,
        memory_max_bytes: Optional[Size] = None,
        auto_budget_stall_ppm: Optional[int] = None,
        fault_trace: Optional[Path] = None,
        # END GENERATED OPTIONS
    ) -> None: ...
    @property
    def size(self) -> int: ...
    @property
    def address(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def exports(self) -> int: ...
    @property
    def fault_mode(self) -> str: ...
    def __len__(self) -> int: ...
    def stats(self) -> Dict[str, Any]: ...
    def prefault(self, offset: int = 0, length: Optional[int] = None) -> None: ...
    def pin(self, offset: int = 0, length: Optional[int] = None) -> None: ...
    def unpin(self, offset: int = 0, length: Optional[int] = None) -> None: ...
    def advise_cold(self, offset: int = 0, length: Optional[int] = None) -> None: ...
    def advise_willneed(self, offset: int = 0, length: Optional[int] = None) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Region": ...
    def __exit__(self, *exc: Any) -> bool: ...

class Region(RegionBase):
    """Memory whose cold pages zpage compresses; supports the buffer protocol."""

    def __buffer__(self, flags: int) -> memoryview: ...
    def __release_buffer__(self, view: memoryview) -> None: ...

class ArrayAllocator:
    def __init__(self, budget: Budget, min_bytes: int, arena_bytes: int = ...) -> None: ...
    def stats(self) -> Dict[str, Any]: ...
    def owns(self, address: int, length: int) -> bool: ...
    def advise_cold(self, address: int, length: int) -> None: ...

def make_numpy_handler(api: Any, allocator: ArrayAllocator) -> Any: ...
def enter_python_objects(allocator: ArrayAllocator) -> int: ...
def exit_python_objects(allocator: ArrayAllocator, previous: int) -> None: ...
def owns(address: int, length: int) -> bool: ...
def carve_every_size(on: bool) -> bool: ...
def set_numpy_handler(api: Any, handler: Any) -> Any: ...
def pin_memory(address: int, length: int) -> None: ...
def unpin_memory(address: int, length: int) -> None: ...
def analyze(
    path_or_pid: Any,
    codecs: Optional[Sequence[str]] = None,
    pools: Optional[Sequence[str]] = None,
    *,
    rounds: int = 3,
    max_pages: Optional[int] = None,
) -> Dict[str, Any]: ...
def kernel_status() -> Dict[str, Any]: ...
def syscall_wrappers() -> Dict[str, Any]: ...
