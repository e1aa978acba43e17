import os

import pytest

MiB = 1 << 20


def scale() -> int:
    """Test sizes grow with ZPAGE_PY_TEST_SCALE (CI runs at 1)."""
    return max(1, int(os.environ.get("ZPAGE_PY_TEST_SCALE", "1")))


@pytest.fixture
def np():
    return pytest.importorskip("numpy")
