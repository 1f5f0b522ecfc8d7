import logging

import pytest


@pytest.fixture(autouse=True)
def _quiet_libai_logger():
    yield
    # each Runner adds a file handler for its run folder; drop them between tests
    logger = logging.getLogger("libai")
    for h in list(logger.handlers):
        if isinstance(h, logging.FileHandler):
            logger.removeHandler(h)
            h.close()
