"""libai.analysis.logs_tables: how the tables of analyze_logs write their numbers."""

import io

from libai.analysis.logs_read import RunSummary, TrainTime
from libai.analysis.logs_tables import _duration, summary_table, train_time_table


def test_durations_have_one_format_short_or_long():
    """A short run and a long one read alike (issue 27: the summary mixed `2.5 s` and
    `0:02:43`): h:mm:ss with tenths, as the log lines' eta."""
    assert _duration(2.5) == "0:00:02.5"
    assert _duration(163.04) == "0:02:43.0"
    assert _duration(59.96) == "0:01:00.0"  # rounding carries into the minute
    assert _duration(12 * 3600) == "12:00:00.0"
    assert _duration(None) == "-"


def _render(table) -> str:
    from rich.console import Console

    console = Console(width=200, no_color=True, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def test_a_short_and_a_long_run_side_by_side():
    short, long = RunSummary({}, 100, 2.5), RunSummary({}, 2000, 163.0)
    text = _render(summary_table({"short": short, "long": long}))
    assert "0:00:02.5" in text and "0:02:43.0" in text and " s " not in text
    times = {name: TrainTime(n, t / n, 0.1, 10, 0.01, 20, None, t)
             for name, n, t in (("short", 100, 2.5), ("long", 2000, 163.0))}
    text = _render(train_time_table(times))
    assert "0:00:02.5" in text and "0:02:43.0" in text
