"""Helper of test_jax_adapter.py: ``to_jax`` with a ``NamedSharding`` over 2 host devices, in a fresh process
(``XLA_FLAGS=--xla_force_host_platform_device_count=2`` must be set before jax is imported). Prints JSON: per
batch the sharding, the shape of each device's shard and the values; a restore's rest; the error for a batch that
does not split."""

from __future__ import annotations

import json
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import headrace as hr
from headrace.jax import to_jax


def main() -> None:
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    x = np.arange(48, dtype=np.float32).reshape(24, 2)
    ds = hr.Dataset.from_tensor_slices({"x": x, "id": np.arange(24)}).shuffle(24, seed=2).batch(4)
    out: dict = {"devices": len(jax.devices()), "batches": []}
    it = to_jax(ds, sharding=sharding)
    for i, batch in enumerate(it):
        out["batches"].append({
            "sharding_ok": batch["x"].sharding == sharding and batch["id"].sharding == sharding,
            "type": type(batch["x"]).__name__, "shape": list(batch["x"].shape), "dtype": str(batch["x"].dtype),
            "shards": sorted([list(s.data.shape), s.device.id] for s in batch["x"].addressable_shards),
            "shard_ids": [np.asarray(s.data).tolist() for s in sorted(batch["id"].addressable_shards,
                                                                     key=lambda s: s.index[0].start)],
            "x": np.asarray(batch["x"]).tolist(), "id": np.asarray(batch["id"]).tolist()})
        if i == 1:
            out["state"] = it.get_state()
    restored = to_jax(ds, sharding=sharding)
    restored.set_state(out["state"])
    out["rest"] = [np.asarray(b["id"]).tolist() for b in restored]
    bad = to_jax(hr.Dataset.range(10).batch(3), sharding=sharding)
    try:
        next(bad)
    except ValueError as e:
        out["error"] = str(e)
    bad.close()
    out["alive_after_close"] = bad.threads_alive
    print(json.dumps(out))


if __name__ == "__main__":
    main()
