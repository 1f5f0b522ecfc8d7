import platform

import pytest
import resume_helpers
import torch

# A Runner logs platform.platform(), whose first call in a process runs `uname -p`: a process,
# which the fast tier's guard refuses. Asked here once, before any test, the answer is cached.
platform.platform()


@pytest.fixture(autouse=True)
def _fresh_state():
    # One thread: these models are tiny, and on a busy machine OpenMP threads waiting for each
    # other make every small op a thousand times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    resume_helpers.LOADED.clear()
    yield
    torch.set_num_threads(threads)
    resume_helpers.LOADED.clear()
