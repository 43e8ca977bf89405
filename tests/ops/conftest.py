"""The demo lake the ops tests share: `amqplens run` on the demo capture, on the session's local[2] Spark."""

from __future__ import annotations

import pytest

from amqplens import cli
from tests.conftest import ROOT

DEMO = ROOT / "amqplens" / "data" / "demo.pcap"


@pytest.fixture(scope="session")
def demo_lake(spark, tmp_path_factory):
    """cli.main reuses the active session (the shared one), as a notebook's amqplens would."""
    out = tmp_path_factory.mktemp("demo")
    code = cli.main(["run", "--input", str(DEMO), "--lake", str(out / "lake"), "--run-id", "local",
                     "--set", f"report.out={out / 'report'}"])
    assert code == 0
    return out / "lake"
