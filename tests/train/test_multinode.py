"""``headrace train`` as two torchrun "nodes" on loopback (c10d rendezvous, one rank each, gloo): the
ranks' data is disjoint and together complete in every epoch (by element IDs), every rank ends with the
same weights, and metrics and the summary are written once (rank 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_helpers import TORCHRUN, free_port, job_env, launch

N = 32  # records, each labelled with its own ID (so the labels a rank trains on are its element IDs)
SPY = Path(__file__).with_name("cli_spy_job.py")


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    from headrace.image.photos import iter_photo_jpegs
    from headrace.io.example import encode
    from headrace.io.sharded_writer import ShardedWriter

    root = tmp_path_factory.mktemp("multinode")
    with ShardedWriter(root / "shards", "train", num_shards=2) as w:  # shared by both nodes
        for i, (jpeg, _) in enumerate(iter_photo_jpegs(N, (32, 24))):
            w.write(encode({"image/encoded": jpeg, "image/class/label": i}))
    endpoint = f"127.0.0.1:{free_port()}"
    train = ["train", str(root / "shards"), "--model", "resnet18", "--image-size", "16", "--global-batch-size",
             "8", "--micro-batch-size", "4", "--epochs", "2", "--checkpoint-dir", str(root / "ckpt")]
    nodes = [[*TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
              endpoint, "--rdzv-id", "headrace-multinode-test", "--node-rank", str(node), "--local-addr",
              "127.0.0.1", str(SPY), str(root), *train] for node in (0, 1)]
    results = launch(nodes, job_env(), root, timeout_s=150)
    return root, [text for _, text in results]


def _labels(root: Path, r: int) -> list[tuple[int, int, list[int]]]:
    rows = []
    for line in (root / f"labels-rank{r}.txt").read_text().splitlines():
        epoch, step, *ids = (int(v) for v in line.split())
        rows.append((epoch, step, ids))
    return rows


@pytest.mark.slow
def test_multinode_ranks_read_disjoint_complete_shares_of_the_shared_shards(two_nodes) -> None:
    root, _ = two_nodes
    envs = [json.loads((root / f"env-rank{r}.json").read_text()) for r in (0, 1)]
    assert {e["GROUP_RANK"] for e in envs} == {"0", "1"}  # one rank on each node
    assert all(e["WORLD_SIZE"] == "2" and e["LOCAL_RANK"] == "0" for e in envs)
    rows = {r: _labels(root, r) for r in (0, 1)}
    for r in (0, 1):
        assert [(e, s) for e, s, _ in rows[r]] == [(1, 1), (1, 2), (1, 3), (1, 4), (2, 5), (2, 6), (2, 7), (2, 8)]
        assert all(len(ids) == 4 for _, _, ids in rows[r])  # global batch 8 over 2 ranks
    for epoch in (1, 2):  # (epochs count from 1)
        mine = {r: [i for e, _, ids in rows[r] if e == epoch for i in ids] for r in (0, 1)}
        assert not set(mine[0]) & set(mine[1])  # disjoint
        assert sorted(mine[0] + mine[1]) == list(range(N))  # together complete, each once


@pytest.mark.slow
def test_multinode_replicas_end_with_the_same_weights(two_nodes) -> None:
    root, _ = two_nodes
    a, b = (torch.load(root / f"params-rank{r}.pt") for r in (0, 1))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    first = torch.load(sorted((root / "ckpt").glob("ckpt-*.pt"))[-1], weights_only=True)["model"]
    assert all(torch.equal(first[k], a[k]) for k in a)  # the checkpoint rank 0 wrote is that model


@pytest.mark.slow
def test_multinode_metrics_and_summary_are_written_once(two_nodes) -> None:
    root, outputs = two_nodes
    events = [json.loads(line) for line in (root / "ckpt" / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
    assert [e["steps"] for e in events if e["event"] == "end"] == [8]
    summaries = [json.loads(line) for text in outputs for line in text.splitlines() if line.startswith('{"steps"')]
    assert len(summaries) == 1 and summaries[0]["steps"] == 8 and summaries[0]["records"] == N
