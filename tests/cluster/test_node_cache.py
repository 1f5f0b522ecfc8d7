"""The corpus cache of several nodes (issue 38; docs/cluster.md, where caches and work dirs
live): built once where two nodes share a disk whose lock does not reach across nodes (no
``flock``, or a node-local one), and the builder recorded. Device: none (files and locks);
tests/cluster/test_two_nodes.py holds the build-once rule with two real nodes' processes.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
from pathlib import Path


def _tiny_corpus(tmp_path: Path) -> Path:
    text = tmp_path / "tiny.txt"
    text.write_text("".join(f"line {i} of a small corpus with a few words in it\n\n"
                            for i in range(40)))
    return text


def test_a_shared_cache_without_flock_is_built_once_under_a_lock_file(tmp_path, monkeypatch):
    """A shared disk that refuses flock (Lustre mounted without it, some NFS): the build takes a
    lock file instead of failing with OSError, and a second process finds the corpus built."""
    import fcntl

    from libai.data.text import load_corpus

    def no_flock(f, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    text = _tiny_corpus(tmp_path)
    spec = dict(type="wordpiece", vocab_size=120)
    first = load_corpus(text, tokenizer=spec, cache_dir=tmp_path / "cache")
    again = load_corpus(text, tokenizer=spec, cache_dir=tmp_path / "cache")
    assert first.name == again.name and len(first.tokens) == len(again.tokens)
    assert [p.name for p in (tmp_path / "cache" / "text").iterdir() if p.is_dir()] == [first.name]


def test_a_build_that_lost_the_race_on_a_node_local_lock_keeps_the_winners(tmp_path, monkeypatch,
                                                                             libai_log):
    """Two nodes whose flock is node-local (each holds "the" lock): the other node renamed its
    build into place first. This one keeps the winner's folder, removes its own, and never
    removes a temporary folder of another node's build that is still running."""
    from libai.data.text import load_corpus, sources

    text = _tiny_corpus(tmp_path)
    spec = dict(type="wordpiece", vocab_size=120)
    cache = tmp_path / "cache"
    winner = load_corpus(text, tokenizer=spec, cache_dir=cache)
    folder = cache / "text" / winner.name
    meta = (folder / "meta.json").read_text()
    running = folder.with_name(f"{folder.name}.tmp-othernode-{os.getpid()}")
    running.mkdir()  # another node's build in progress, with this process's pid by chance
    build = sources._build

    def slow_build(src, tmp, *args):  # the other node finishes first, while this one builds
        out = build(src, tmp, *args)
        shutil.copytree(tmp, folder)
        (folder / "meta.json").write_text(meta)
        return out

    shutil.rmtree(folder)
    monkeypatch.setattr(sources, "_build", slow_build)
    corpus = load_corpus(text, tokenizer=spec, cache_dir=cache)
    assert any("built by another process meanwhile" in m for m in libai_log), libai_log
    assert corpus.name == winner.name and (folder / "meta.json").read_text() == meta
    assert running.is_dir()  # not this node's: left alone
    assert sorted(p.name for p in (cache / "text").iterdir() if p.is_dir()) == sorted(
        [folder.name, running.name])


def test_the_builder_is_recorded(tmp_path, monkeypatch):
    """meta.json says which host, process, node and ranks built a corpus (docs/cluster.md)."""
    from libai.data.text import load_corpus

    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("GROUP_RANK", "1")
    corpus = load_corpus(_tiny_corpus(tmp_path), tokenizer=dict(type="wordpiece", vocab_size=120),
                         cache_dir=tmp_path / "cache")
    meta = json.loads((tmp_path / "cache" / "text" / corpus.name / "meta.json").read_text())
    assert meta["built_by"] == {"host": socket.gethostname(), "pid": os.getpid(), "rank": "3",
                                "local_rank": "1", "node": "1"}
