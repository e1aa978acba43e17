"""The package itself: importable, one abi3 extension, typed, documented."""

import pathlib
import pydoc

import zpage


def test_import_exposes_the_api():
    for name in ("Region", "Budget", "budget", "resident", "analyze", "kernel_status", "ZpageError"):
        assert hasattr(zpage, name), name
    assert zpage.PAGE_SIZE == 4096


def test_extension_is_abi3():
    # One wheel for every CPython >= 3.9: the extension carries the stable-ABI tag.
    native = pathlib.Path(zpage._zpage.__file__).name
    assert native.endswith(".abi3.so"), native


def test_package_is_typed():
    package = pathlib.Path(zpage.__file__).parent
    assert (package / "py.typed").exists()
    stub = (package / "_zpage.pyi").read_text()
    for name in ("class Region", "class Budget", "def analyze", "def kernel_status"):
        assert name in stub, name


def test_help_reads_well():
    text = pydoc.render_doc(zpage, renderer=pydoc.plaintext)
    assert "compressed memory for Python and NumPy" in text
    for name in ("Region", "Budget", "budget", "resident", "analyze", "ZpageError"):
        assert name in text, name
    region_help = pydoc.render_doc(zpage.Region, renderer=pydoc.plaintext)
    for method in ("prefault", "pin", "unpin", "advise_cold", "advise_willneed", "stats", "close"):
        assert method in region_help, method
    assert "buffer protocol" in region_help
