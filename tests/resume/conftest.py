import pytest
import resume_helpers


@pytest.fixture(autouse=True)
def _fresh_state():
    # the datasets of resume_helpers record what they load; each test reads its own (one
    # thread per process is the suite's setting: tests/conftest.py)
    resume_helpers.LOADED.clear()
    yield
    resume_helpers.LOADED.clear()
