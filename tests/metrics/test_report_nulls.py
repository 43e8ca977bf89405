"""The report's drawing code on rows whose columns are null for some dialect (no Spark: the pandas frames the
report's queries return). Bad input tried: 0-10 credit rows (no 1.0 link handle: NaN in pandas, the crash of issue
38 item 1), a channel-less lifecycle frame, a flow_events row with no channel."""

from __future__ import annotations

import math

import pandas as pd

from amqplens.report import pages, plots

CID = "a286dafa4528c1315123ad5847722a17"


def credit_rows() -> pd.DataFrame:
    ts = pd.to_datetime(["2026-01-01 00:00:00", "2026-01-01 00:00:01"], utc=True)
    # a 1.0 link (handle 3) and a 0-10 destination (no handle; the destination rides in consumer_tag)
    return pd.DataFrame({"connection_id": [CID] * 4, "channel": [1, 1, 1, 1], "consumer_tag": [None, None, "d1", "d1"],
                         "link_handle": [3, 3, math.nan, math.nan], "ts": list(ts) * 2, "link_credit": [10, 9, 10, 9]})


def test_link_entities_are_metrics_flows_names():
    # amqplens/jobs/metrics/flow.py: concat_ws("/", connection_id, channel, "handle N" or "destination D")
    names = [plots.link_entity(r) for r in credit_rows().itertuples()]
    assert names == [f"{CID}/1/handle 3"] * 2 + [f"{CID}/1/destination d1"] * 2
    no_channel = pd.DataFrame({"connection_id": [CID], "channel": [math.nan]})
    assert [plots.channel_entity(r) for r in no_channel.itertuples()] == [CID]


def test_credit_series_of_both_dialects_draw():
    labels = {f"{CID}/1/destination d1": "c ch 1 link destination d1"}
    fig = plots.step_series(credit_rows(), labels, plots.link_entity, "link_credit", "Link credit", "link credit", log=True)
    assert sorted(t["name"] for t in fig["data"]) == sorted(["c ch 1 link destination d1 link_credit", f"{CID}/1/handle 3 link_credit"])


def test_a_frame_without_a_channel_sits_on_the_connection_row():
    row = pd.DataFrame({"performative": ["attach"], "handle": [0.0], "class_name": [None], "channel": [math.nan]})
    assert [pages._row_key(r) for r in row.itertuples()] == ["connection"]
