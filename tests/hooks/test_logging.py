"""libai.utils.logging: console/file handlers per rank, idempotence, print_log."""

import io
import logging
import uuid

import pytest
from rich.console import Console
from rich.logging import RichHandler

from libai.utils import logging as libai_logging
from libai.utils.logging import get_console, get_logger, print_log


@pytest.fixture
def name():
    n = f"libai.test.{uuid.uuid4().hex}"
    yield n
    for h in list(logging.getLogger(n).handlers):
        logging.getLogger(n).removeHandler(h)
        h.close()


def test_rank0_console_and_file(name, tmp_path, capsys):
    log_file = tmp_path / "sub" / "run.log"
    logger = get_logger(name, log_file=str(log_file), rank=0)
    logger.info("hello %d", 3)
    logger.debug("hidden")
    out = capsys.readouterr().out
    assert "INFO" in out and "hello 3" in out and "hidden" not in out
    text = log_file.read_text()
    assert "hello 3" in text and " - INFO - " in text
    assert text[:4].isdigit()  # starts with a date


def test_idempotent(name, tmp_path, capsys):
    first = get_logger(name, log_file=str(tmp_path / "a.log"), rank=0)
    second = get_logger(name, log_file=str(tmp_path / "a.log"), rank=0)
    assert first is second and len(second.handlers) == 2
    second.info("once")
    assert capsys.readouterr().out.count("once") == 1
    assert (tmp_path / "a.log").read_text().count("once") == 1
    # a new file replaces the old one rather than adding a third handler
    third = get_logger(name, log_file=str(tmp_path / "b.log"), rank=0)
    assert len(third.handlers) == 2
    third.info("moved")
    assert "moved" in (tmp_path / "b.log").read_text()
    assert "moved" not in (tmp_path / "a.log").read_text()


def test_other_ranks_only_warn_with_prefix(name, tmp_path, capsys):
    logger = get_logger(name, log_file=str(tmp_path / "r1.log"), rank=1)
    logger.info("quiet")
    logger.warning("careful")
    out = capsys.readouterr().out
    assert "quiet" not in out
    assert "[rank 1] " in out and "careful" in out
    assert not (tmp_path / "r1.log").exists()
    assert len(logger.handlers) == 1


def test_rich_handler_on_a_terminal(name, monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(
        libai_logging, "_console", Console(file=buf, force_terminal=True, width=120)
    )
    logger = get_logger(name, rank=0)
    handler = logger.handlers[0]
    assert isinstance(handler, RichHandler)
    logger.info("rich line")
    assert "rich line" in buf.getvalue()
    assert "test_logging.py" not in buf.getvalue()  # no path column


def test_get_console_is_shared():
    assert get_console() is get_console()


def test_print_log(name, capsys):
    logger = logging.getLogger(name)
    handler = logging.StreamHandler(io.StringIO())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    print_log("to logger", logger=logger)
    print_log("by name", logger=name, level="WARNING")
    print_log("nothing", logger="silent")
    text = handler.stream.getvalue()
    assert "to logger" in text and "by name" in text and "nothing" not in text
    with pytest.raises(ValueError, match="log level"):
        print_log("x", logger=logger, level="LOUD")
