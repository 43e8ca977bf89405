"""The pipeline run that ``tools.bench`` times: ingest-captures then lifecycle, in one Spark session.

    python -m tools.bench_pipeline --input F --lake DIR [--set k=v ...] [--stages ingest,lifecycle]

``amqplens run`` also computes metrics and writes the report; the benchmark's
target is pcap -> frames + deliveries, so this runs the two stages that make
those tables and prints one line per stage with its time (the bench parses
``<stage>: ... (<seconds>s)``) and the session start time.
"""

from __future__ import annotations

import argparse
import sys
import time

from amqplens.config import add_config_arguments, config_from_args

STAGES = ("ingest", "lifecycle")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_pipeline", description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", nargs="+", required=True)
    ap.add_argument("--lake", required=True)
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated, of: " + ", ".join(STAGES))
    add_config_arguments(ap)
    args = ap.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    if not set(stages) <= set(STAGES):
        ap.error(f"--stages: unknown stage in {args.stages!r}")
    conf = config_from_args(args)

    from amqplens.jobs import ingest_captures
    from amqplens.jobs import lifecycle
    from amqplens.session import get_spark

    t0 = time.monotonic()
    spark = get_spark(conf)
    print(f"session: started ({time.monotonic() - t0:.2f}s)", flush=True)
    ids: list[str] = []
    if "ingest" in stages:
        t0 = time.monotonic()
        result = ingest_captures.run(spark, conf, args.input)
        ids = [c["capture_id"] for c in result.captures] + result.skipped
        print(f"ingest-captures: {len(result.captures)} capture(s) written ({time.monotonic() - t0:.2f}s)", flush=True)
    if "lifecycle" in stages:
        t0 = time.monotonic()
        done = lifecycle.run(spark, conf, ids or None)
        print(f"lifecycle: {len(done)} capture(s) written ({time.monotonic() - t0:.2f}s)", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
