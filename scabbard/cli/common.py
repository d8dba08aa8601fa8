"""What several commands share: the dataset a query runs on, the storage folder."""

from __future__ import annotations

import time
from pathlib import Path


def storage_dir(args, query: str) -> Path:
    if args.storage:
        return Path(args.storage)
    return Path("storage") / f"{query}-{time.strftime('%Y%m%d-%H%M%S')}"



def query_dataset(args):
    """The dataset ``--data`` names, or the query's small default (generated on first use)."""
    from scabbard import queries, workloads
    from scabbard.data import dataset_path, open_dataset

    workload = queries.workload_of(args.query)
    schema = workloads.get(workload).SCHEMA
    verify = getattr(args, "verify", False)
    if args.data:
        ds = open_dataset(args.data, schema=schema, verify=verify)
    else:
        path = dataset_path("data", workload, "small")
        if not (path / "manifest.json").is_file():
            print(f"{path} not found: generating it (scabbard datagen {workload} --scale small)",
                  flush=True)
            spec = workloads.get(workload).SPEC
            spec.generate(scale="small", out="data", log=lambda s: print(s, flush=True))
        ds = open_dataset(path, schema=schema, verify=verify)
    return ds


