"""The Spark generators at tiny scale: determinism, formats, and each benchmark's distributions."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from scabbard import workloads
from scabbard.data import open_dataset
from scabbard.data.parquet import read_parquet
from scabbard.workloads.generator import Datagen, generate, make_params

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("name", workloads.ALL)
def test_tiny_dataset_is_complete_and_valid(tiny, name):
    ds = tiny[name]
    spec = workloads.get(name).SPEC
    params = make_params(spec, scale="tiny")
    assert ds.rows == params.rows
    assert ds.schema == spec.schema
    assert set(ds.tables) == set(spec.tables)
    ts = np.asarray(ds.column("timestamp"))
    assert np.all(np.diff(ts) >= 0), "event time must not decrease"
    assert ts[0] >= 0 and ts[-1] < params.duration * 1000
    ds.verify()
    assert open_dataset(ds.path, schema=spec.schema).checksum == ds.checksum


@pytest.mark.parametrize("name", workloads.ALL)
def test_parquet_and_replay_hold_the_same_rows(tiny, name):
    ds = tiny[name]
    for tname, table in [("stream", ds.stream), *ds.tables.items()]:
        files = [table.path / f for f in table.entry["parquet"]]
        assert files and all(f.name.startswith("part-") for f in files)
        back = read_parquet(table.schema, files)
        for f, a, b in zip(table.schema.fields, table.columns, back, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"{name}.{tname}.{f.name}")


@pytest.mark.parametrize("name", workloads.ALL)
def test_same_parameters_give_identical_bytes_whatever_the_partitioning(spark, tiny, tmp_path, name):
    spec = workloads.get(name).SPEC
    again = generate(spec, make_params(spec, scale="tiny"),
                     Datagen(out=tmp_path, partitions=3, spark=spark, progress=False))
    assert again.manifest["run"]["partitions"] == 3
    assert again.checksum == tiny[name].checksum
    for c1, c2 in zip(again.manifest["stream"]["columns"], tiny[name].manifest["stream"]["columns"],
                      strict=True):
        assert c1["sha256"] == c2["sha256"]


def test_a_dataset_from_older_generator_code_is_regenerated(spark, tmp_path):
    import json

    spec = workloads.get("sg").SPEC
    first = spec.generate(scale="tiny", out=tmp_path, spark=spark, progress=False)
    manifest = json.loads((first.path / "manifest.json").read_text())
    manifest["generator_code"] = "0" * 16
    (first.path / "manifest.json").write_text(json.dumps(manifest))
    again = spec.generate(scale="tiny", out=tmp_path, spark=spark, progress=False)
    assert again.manifest["generator_code"] != "0" * 16
    assert again.manifest["run"]["created"] >= first.manifest["run"]["created"]
    assert again.checksum == first.checksum


def test_another_seed_gives_other_data(spark, tiny, tmp_path):
    spec = workloads.get("ysb").SPEC
    other = generate(spec, make_params(spec, scale="tiny", seed=7),
                     Datagen(out=tmp_path, spark=spark, progress=False))
    assert other.name == "d30s-r1000-seed7"
    assert other.checksum != tiny["ysb"].checksum


def test_an_identical_dataset_is_kept_and_a_different_one_is_not_overwritten(spark, tiny, data_root):
    spec = workloads.get("sg").SPEC
    before = tiny["sg"].manifest["run"]["created"]
    again = generate(spec, make_params(spec, scale="tiny"),
                     Datagen(out=data_root, spark=spark, progress=False))
    assert again.manifest["run"]["created"] == before  # not regenerated
    from scabbard.workloads.generator import DatagenError

    with pytest.raises(DatagenError, match="already holds a dataset with other parameters"):
        generate(spec, make_params(spec, scale="tiny", plugs=100),
                 Datagen(out=data_root, name="tiny", spark=spark, progress=False))


# -- each benchmark's specification ---------------------------------------------------------------
def col(ds, name, table=None):
    t = ds.table(table) if table else ds.stream
    return np.asarray(t.column(name))


def test_ysb_events_campaigns_and_ads(tiny):
    ds = tiny["ysb"]
    et = col(ds, "event_type")
    shares = np.bincount(et, minlength=3) / len(et)
    np.testing.assert_allclose(shares, 1 / 3, atol=0.02)  # uniform view/click/purchase
    ad_type = np.bincount(col(ds, "ad_type"), minlength=5) / len(et)
    np.testing.assert_allclose(ad_type, 1 / 5, atol=0.02)
    rel_ads = col(ds, "ad_id", "ad_campaign")
    rel_camps = col(ds, "campaign_id", "ad_campaign")
    assert len(np.unique(rel_ads, axis=0)) == 1000
    camps, per_campaign = np.unique(rel_camps, axis=0, return_counts=True)
    assert len(camps) == 100 and set(per_campaign) == {10}
    ads = col(ds, "ad_id")
    known = {tuple(r) for r in rel_ads}
    assert all(tuple(r) in known for r in np.unique(ads, axis=0))
    assert len(np.unique(col(ds, "user_id"), axis=0)) <= 100
    assert set(col(ds, "ip_address")) == {0x01020304}
    # evenly spaced event time at --rate (1000/s at tiny scale)
    ts = col(ds, "timestamp")
    assert np.array_equal(ts, np.arange(len(ts)) * 1000 // 1000)


def test_darwin_keys_values_and_the_key_space_option(spark, tiny, tmp_path):
    ds = tiny["darwin"]
    keys, values = col(ds, "key"), col(ds, "value")
    assert keys.min() >= 0 and keys.max() < 100_000 and values.min() >= 0 and values.max() < 1000
    # uniform keys: 90,000 draws from 100,000 keys leave about 1 - e^-0.9 of them seen
    assert abs(len(np.unique(keys)) / 100_000 - (1 - np.exp(-0.9))) < 0.01
    assert abs(values.mean() - 499.5) < 5
    ts = col(ds, "timestamp")  # evenly spaced at 500/s
    assert np.array_equal(ts, np.arange(len(ts)) * 1000 // 500)
    few = workloads.get("darwin").SPEC.generate(scale="tiny", options={"keys": 10},
                                                out=tmp_path, spark=spark, progress=False)
    assert few.path.name.endswith("keys10")
    assert set(np.unique(col(few, "key"))) == set(range(10))


def test_lrb_domains_and_thirty_second_reports(tiny):
    ds = tiny["lrb"]
    lane, direction = col(ds, "lane"), col(ds, "direction")
    speed, pos = col(ds, "speed"), col(ds, "position")
    assert set(np.unique(lane)) <= {0, 1, 2, 3, 4} and set(np.unique(lane)) >= {0, 1, 2, 3, 4}
    assert set(np.unique(direction)) == {0, 1}
    assert pos.min() >= 0 and pos.max() <= 527_999
    seg = pos // 5280
    assert seg.min() >= 0 and seg.max() <= 99 and len(np.unique(seg)) > 50
    assert speed.min() >= 0 and speed.max() <= 100
    assert np.all(speed[lane == 0] <= 40) and np.all(speed[lane == 4] == 10)
    ts = col(ds, "timestamp")
    assert np.all(ts % 1000 == 0)
    assert np.all(np.bincount(ts // 1000) == 250)  # --rate reports every second
    veh = col(ds, "vehicle")
    order = np.lexsort((ts, veh))
    same = veh[order][1:] == veh[order][:-1]
    gaps = np.diff(ts[order])[same]
    assert len(gaps) > 1000 and np.all(gaps == 30_000)
    # direction of travel: positions grow eastbound, shrink westbound
    dpos = np.diff(pos[order])[same]
    ddir = direction[order][1:][same]
    assert np.all(dpos[ddir == 0] > 0) and np.all(dpos[ddir == 1] < 0)


def test_lrb_has_congested_and_free_segments_for_lrb1(tiny):
    ds = tiny["lrb"]
    travel = col(ds, "lane")
    keep = (travel >= 1) & (travel <= 3)
    seg = col(ds, "position")[keep] // 5280
    key = col(ds, "direction")[keep] * 100 + seg
    sums = np.bincount(key, weights=col(ds, "speed")[keep], minlength=200)
    counts = np.bincount(key, minlength=200)
    avg = sums[counts > 20] / counts[counts > 20]
    assert (avg < 40).any() and (avg >= 40).any()


def test_nexmark_auctions_in_flight_set_nq_key_space(spark, tiny, tmp_path):
    """--auctions: the bids not for the hot auction go to one of that many latest auctions
    (Beam's numInFlightAuctions, 100 by default), so a window sees that many keys."""
    def keys_in_last_second(ds):
        ts, auction = col(ds, "timestamp"), col(ds, "auction")
        return len(np.unique(auction[ts >= ts[-1] - 1000]))

    many = workloads.get("nexmark").SPEC.generate(scale="tiny", options={"auctions": 5000},
                                                  out=tmp_path, spark=spark, progress=False)
    assert many.path.name.endswith("auctions5000")
    # a second's 1,000 bids: half for the hot auction, half drawn from the auctions in flight
    # (a window that moves on by the ~65 auctions created in that second)
    assert keys_in_last_second(tiny["nexmark"]) <= 100 + 10 + 65 + 2
    assert keys_in_last_second(many) > 300  # drawn from the ~1,950 auctions created so far
    newest = (col(many, "event_id") // 50) * 3 + 2 + 1000 + 10
    assert np.all(col(many, "auction") <= newest)


def test_nexmark_hot_items_bidders_and_side_tables(tiny):
    ds = tiny["nexmark"]
    e = col(ds, "event_id")
    assert np.all(e % 50 >= 4)  # bids are 46 of every 50 events
    last_auction = (e // 50) * 3 + 2
    hot = (col(ds, "auction") - 1000) == (last_auction // 100) * 100
    assert 0.48 < hot.mean() < 0.56  # P(hot) = 1/2, plus cold draws that hit it
    hot_bidder = (col(ds, "bidder") - 1000) == (e // 50) // 100 * 100 + 1
    assert 0.72 < hot_bidder.mean() < 0.80  # P(hot) = 3/4
    price = col(ds, "price")
    assert price.min() >= 100 and price.max() <= 100_000_000
    assert 0.45 < (col(ds, "channel") < 4).mean() < 0.55
    ids = col(ds, "id", "auctions")
    assert np.array_equal(ids, 1000 + np.arange(len(ids)))
    assert np.isin(col(ds, "auction"), ids).all()
    assert set(np.unique(col(ds, "category", "auctions"))) == {10, 11, 12, 13, 14}
    persons = col(ds, "id", "persons")
    assert np.isin(col(ds, "bidder"), persons).all()
    assert np.isin(col(ds, "seller", "auctions"), persons).all()
    a = ds.table("auctions")
    assert np.all(np.asarray(a.column("reserve")) >= np.asarray(a.column("initial_bid")))
    assert np.all(np.asarray(a.column("expires")) > np.asarray(a.column("timestamp")))


def test_cm_event_mix_placement_and_bursts(tiny):
    ds = tiny["cm"]
    et = col(ds, "event_type")
    shares = np.bincount(et, minlength=6) / len(et)
    expected = np.array([32.6, 32.4, 1.2, 0.49, 27.3, 6.0])
    np.testing.assert_allclose(shares, expected / expected.sum(), atol=0.015)
    machine = col(ds, "machine_id")
    assert np.all(machine[et == 0] == -1)  # SUBMIT: not placed yet
    assert np.all(machine[np.isin(et, [1, 2, 3, 4])] > 0)
    from scabbard.workloads.cm import CPU_SIZES

    assert set(np.unique(col(ds, "cpu"))) <= set(np.float32(CPU_SIZES))
    job, cat = col(ds, "job_id"), col(ds, "category")
    _, first = np.unique(job, return_index=True)
    assert 0.70 < (cat[first] == 0).mean() < 0.92  # scheduling class 0 for ~81% of jobs
    per_second = np.bincount(col(ds, "timestamp") // 1000)
    assert per_second.std() / per_second.mean() > 0.5  # bursty arrivals
    assert (col(ds, "disk") == 0).mean() > 0.97


def test_sg_sensors_hierarchy_and_meters(tiny):
    ds = tiny["sg"]
    prop = col(ds, "property")
    assert (prop == 0).sum() == (prop == 1).sum()
    load = col(ds, "value")[prop == 1]
    assert 0.55 < (load == 0).mean() < 0.71  # appliances are mostly off
    assert load.min() >= 0 and load.max() <= 3000
    house, household, plug = col(ds, "house"), col(ds, "household"), col(ds, "plug")
    assert house.min() == 0 and house.max() < 40 and plug.max() < 10
    keys = house.astype(np.int64) * 10_000 + household * 100 + plug
    assert len(np.unique(keys)) <= 2125
    work = col(ds, "value")[prop == 0]
    wkeys, wts = keys[prop == 0], col(ds, "timestamp")[prop == 0]
    order = np.lexsort((wts, wkeys))
    same = wkeys[order][1:] == wkeys[order][:-1]
    assert same.sum() > 100 and np.all(np.diff(work[order])[same] >= 0)  # meters only grow
    assert np.array_equal(col(ds, "id"), np.arange(ds.rows))


def test_sm_signals_and_the_distribution_change(spark, tiny, tmp_path):
    ds = tiny["sm"]
    mf01, mf02 = col(ds, "mf01").astype(float), col(ds, "mf02").astype(float)
    assert abs(mf01.mean() - 13053) < 600 and abs(mf02.mean() - 14378) < 700
    assert np.corrcoef(mf01, mf02)[0, 1] > 0.9
    assert np.abs(np.diff(mf01)).mean() < 60  # smooth signal, small steps
    assert col(ds, "pc13").min() >= 53 and col(ds, "pc13").max() <= 86
    for c in ("pc25", "pc26", "pc27", "res"):
        assert not col(ds, c).any()
    assert abs(ds.rows / 300 - 100) < 1e-9
    assert np.array_equal(col(ds, "message_index"), np.arange(ds.rows))

    spec = workloads.get("sm").SPEC
    changed = generate(spec, make_params(spec, scale="tiny", change_at=100),
                       Datagen(out=tmp_path, spark=spark, progress=False))
    ts = col(changed, "timestamp")
    before, after = ts < 100_000, ts >= 100_000
    for c in ("mf01", "mf02", "mf03", "pc13"):
        v = col(changed, c)
        assert v[before].min() > 50 and v[after].max() < 16
    runs = col(changed, "mf01")[after]
    assert np.mean(runs[1:] == runs[:-1]) > 0.85  # constant in runs of 14
    np.testing.assert_array_equal(col(changed, "mf01")[before], col(ds, "mf01")[: before.sum()])


def test_generator_output_folder_layout(tiny):
    ds = tiny["ysb"]
    assert (ds.path / "manifest.json").is_file()
    assert sorted(p.name for p in (ds.path / "stream" / "columns").iterdir()) == sorted(
        f"{n}.bin" for n in ds.schema.names
    )
    pf = pq.ParquetFile(ds.path / "stream" / ds.stream.entry["parquet"][0])
    assert pf.schema_arrow.names == list(ds.schema.names)
    assert not [p for p in ds.path.parent.iterdir() if p.name.startswith(".")]


def test_each_workload_module_exposes_its_generator(spark, tiny, data_root):
    from scabbard.workloads import lrb

    ds = lrb.SPEC.generate(scale="tiny", out=data_root, spark=spark, progress=False)
    assert ds.checksum == tiny["lrb"].checksum and ds.schema is not None
    assert lrb.SCHEMA.row_bytes == 32 and len(lrb.SCHEMA.fields) == 7


def test_datagen_plans_all_workloads_with_their_own_options_and_sums_them_up(tmp_path):
    """``scabbard datagen``'s work (scabbard.workloads.generator): the plan, the output root,
    the table it ends with."""
    from types import SimpleNamespace

    from scabbard import workloads
    from scabbard.workloads import generator as gen

    plans = workloads.plan("all", {"xways": 3}, "tiny")
    assert [spec.name for spec, _ in plans] == list(workloads.NAMES)
    assert {spec.name: dict(p.options).get("xways") for spec, p in plans}["lrb"] == 3
    with pytest.raises(gen.DatagenError, match="--xways does not apply to workload 'cm'"):
        workloads.plan("cm", {"xways": 3})
    with pytest.raises(workloads.UnknownWorkloadError):
        workloads.plan("nope", {})
    assert gen.output_root("hdfs://nn/data") == "hdfs://nn/data"
    assert gen.output_root(str(tmp_path / "d")) == str(tmp_path / "d")
    assert (tmp_path / "d").is_dir()

    def made(rows, secs):
        return SimpleNamespace(rows=rows, manifest={"run": {"seconds_total": secs}},
                               stream=SimpleNamespace(nbytes=2_000_000), path="p")

    assert gen.summary([("sg", made(1_000_000, 2.0)), ("cm", made(10, None))]).splitlines() == [
        "workload          rows  MB (rows)  seconds M tuples/s  path",
        "sg           1,000,000        2.0      2.0       0.50  p",
        "cm                  10        2.0      0.0          -  p"]
