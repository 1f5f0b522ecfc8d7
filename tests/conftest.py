"""Suite-wide settings."""

import importlib.util
import logging
import os
import sys

import pytest


@pytest.fixture(scope="session")
def load_script():
    """``load_script(path, name)``: a script of tools/ or benchmarks/ (not packages) imported as
    the module ``name``, registered in sys.modules (dataclasses look their module up there)."""
    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        module = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session", autouse=True)
def _text_cache(tmp_path_factory, worker_id):
    # The text configs build the built-in corpus into a cache on first use: one per test session,
    # never the user's ~/.cache. Child processes (tools run by the tests) inherit it. pytest-xdist
    # workers share one (the base temp folder's parent is the session's): the cache is built once,
    # by whichever worker comes first, the others wait on its lock (libai/data/text/sources.py).
    old = os.environ.get("LIBAI_CACHE_DIR")
    if worker_id == "master":
        cache = tmp_path_factory.mktemp("libai_cache")
    else:
        cache = tmp_path_factory.getbasetemp().parent / "libai_cache"
        cache.mkdir(exist_ok=True)
    os.environ["LIBAI_CACHE_DIR"] = str(cache)
    yield
    if old is None:
        os.environ.pop("LIBAI_CACHE_DIR", None)
    else:
        os.environ["LIBAI_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def _drop_run_log_files():
    # each Runner adds a file handler for its run folder to the libai logger; drop them between
    # tests so that a test's log never goes to another test's folder
    yield
    logger = logging.getLogger("libai")
    for h in list(logger.handlers):
        if isinstance(h, logging.FileHandler):
            logger.removeHandler(h)
            h.close()


@pytest.fixture
def libai_log():
    """The messages the libai logger emits during the test, in order.

    caplog cannot see them: once a Runner has set the libai logger up it does not propagate to the
    root logger, where caplog listens.
    """
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("libai")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(old_level)


@pytest.fixture
def one_thread():
    """torch on one thread for the test: tiny models, where OpenMP threads only wait for each
    other."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

