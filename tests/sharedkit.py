"""What the tests of datasets and Spark runs at URIs share (local mode and the cluster)."""

from __future__ import annotations

import json

import reference as ref
from scabbard.engine import CollectSink, run_query


def content(manifest: dict) -> dict:
    """A manifest without its run record and Parquet file lists (these follow the partitions)."""
    out = {k: v for k, v in manifest.items() if k != "run"}
    for key in ("stream", "tables"):
        out[key] = json.loads(json.dumps(out[key]))
    out["stream"].pop("parquet")
    for t in out["tables"].values():
        t.pop("parquet")
    return out


def engine_frame(q, ds):
    """The engine's results of query ``q`` on ``ds``, as the reference's frame."""
    sink = CollectSink()
    run_query(q, ds, sink=sink)
    cols = sink.columns()
    return ref.to_frame(q.schema, [cols[n] for n in q.schema.names])
