"""The name that the workers of one torchrun launch share in the launcher's store
(libai.utils.dist._agree_on_launch; docs/cluster.md). Device: the CPU (gloo).

Two nodes' agents count their restarts apart: one restarts its workers because a worker failed
(counted), the other because a node is waiting in the rendezvous (not counted). Named by
``TORCHELASTIC_RESTART_COUNT``, the two halves of one group looked under two prefixes and waited
for each other in init until the timeout; named by rank 0, they meet, and never in the names an
earlier launch left behind.
"""

from __future__ import annotations

import datetime
import json
import threading
import time

import torch.distributed as dist

from libai.utils.dist import _agree_on_launch

SECONDS = datetime.timedelta(seconds=30)


def _store_server():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=SECONDS,
                           wait_for_workers=False)
    return server, lambda: dist.TCPStore("127.0.0.1", server.port, is_master=False,
                                         timeout=SECONDS)


def _stale(store, world_size: int) -> None:
    """What a killed launch left: its name, and its ranks' answers (none of this launch's)."""
    store.set("libai/launch", "earlier")
    store.set("libai/launch/earlier/ranks", json.dumps([f"gone-{r}" for r in range(world_size)]))


def test_the_ranks_of_one_launch_agree_on_a_name_an_earlier_launch_did_not_use():
    server, client = _store_server()
    _stale(client(), 3)
    names = {}

    def rank(r):
        if r == 0:
            time.sleep(0.5)  # the others read the earlier launch's name first
        names[r] = _agree_on_launch(client(), r, 3, SECONDS)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(names) == 3 and len(set(names.values())) == 1, names
    assert names[0] != "earlier"


RANK = r'''
import os, sys, torch, torch.distributed as dist
from libai.utils import dist as D
D.init_dist(backend="gloo", timeout_s=20)
t = torch.tensor([float(D.get_rank() + 1)])
dist.all_reduce(t)
print("sum", t.item(), flush=True)
D.destroy_dist(0)
'''


def test_nodes_that_counted_restarts_apart_start_one_group(tmp_path, run_process):
    """Two workers of one launch whose agents' TORCHELASTIC_RESTART_COUNT differ (1 and 0), with
    an earlier launch's keys in the store, form the group and reduce (before: both waited in
    init until the timeout)."""
    server, client = _store_server()
    _stale(client(), 2)
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(server.port), "WORLD_SIZE": "2",
           "LOCAL_WORLD_SIZE": "1", "TORCHELASTIC_USE_AGENT_STORE": "True",
           "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RUN_ID": "test"}
    runs = {}

    def rank(r):
        runs[r] = run_process(script, env={**env, "RANK": str(r), "LOCAL_RANK": "0",
                                           "GROUP_RANK": str(r),
                                           "TORCHELASTIC_RESTART_COUNT": str(1 - r)},
                              timeout=120)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    for r in range(2):
        assert runs[r].returncode == 0 and "sum 3.0" in runs[r].output, runs[r].output[-3000:]
