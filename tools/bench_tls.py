"""The cost of TLS decryption, per GB: the same AMQP traffic decoded in the clear and over TLS.

    python -m tools.bench --tls --size-mb 320      # (tools/bench.py hands over to ``main`` here)

From ``tools.gen_capture``'s capture (cached in ``--out`` like the main benchmark's), ``tools.gen_tls_capture``
makes two twins, cached beside it: the TLS twin (every connection through real OpenSSL sessions, TLS 1.3
and 1.2 alternating, the secrets in a key log) and the clear twin (the same payload in segments cut the
same way, so the two differ by TLS alone). Each file goes through the batch
functions of the ingest job in one process, without Spark (capture read, the flow sort, TCP
reassembly, TLS, the codecs): CPU seconds (``time.process_time``). Three runs: the clear twin, the
TLS twin with its key log, the TLS twin without (records kept, not decrypted).
The decryption cost per GB is (TLS with keys - plaintext) CPU seconds per GB of the TLS capture; the
frames of the TLS run must equal the plaintext run's in number, every connection ``decrypted``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import time
from pathlib import Path

GB = 1e9
MB = 1e6
WARM_UP = Path(__file__).resolve().parent.parent / "tests" / "data" / "tls" / "tls13.pcap"


def decode_cpu(path: Path, keylog: Path | None) -> dict:
    """CPU seconds of stage 1 + sort + stage 2 on ``path``, with rows by kind and TLS statuses."""
    import pyarrow as pa

    from amqplens.decode import pipeline
    from amqplens.decode.tls import KeyLog
    from amqplens.config import load_config
    from amqplens.jobs.ingest_captures import options_from

    base = options_from(load_config())
    keys = KeyLog.read([keylog]) if keylog else None
    options = dataclasses.replace(base, decode_options=dataclasses.replace(base.decode_options, tls_keys=keys))
    t0 = time.process_time()
    split = pa.RecordBatch.from_pylist([{"capture_id": "bench", "path": str(path), "start": 0, "end": path.stat().st_size,
                                         "split_index": 0}], schema=pipeline.SPLITS_SCHEMA)
    table = pa.Table.from_batches(list(pipeline.read_splits([split], options)), schema=pipeline.PACKETS_OUT_SCHEMA)
    table = table.sort_by([("flow_key", "ascending"), ("ts_us", "ascending"), ("record_offset", "ascending")])
    rows: collections.Counter = collections.Counter()
    statuses: collections.Counter = collections.Counter()
    for batch in pipeline.decode_flows(table.to_batches(max_chunksize=8192), options):
        if not batch.num_rows:
            continue
        kind = batch.column("kind")[0].as_py()
        rows[kind] += batch.num_rows
        if kind == "connection":
            statuses.update(f["tls_status"] for f in batch.column("facts").to_pylist())
    return {"cpu_s": round(time.process_time() - t0, 3), "rows": dict(rows), "tls_status": dict(statuses)}


def ensure_tls_capture(out: Path, size_mb: float, seed: int) -> tuple[Path, Path, Path]:
    """(the clear twin, the TLS twin, the TLS twin's key log) of the generated capture, made when missing."""
    from tools.gen_capture import generate
    from tools.gen_tls_capture import make_tls_twin

    src = out / f"capture-{size_mb:g}mb-seed{seed}.pcap"  # the main benchmark's cache name
    if not src.exists():
        print(f"capture: generating {src} ...", flush=True)
        generate(src, size_mb, seed=seed)
    stem = f"{size_mb:g}mb-seed{seed}"
    clear, tls, keylog = out / f"clear-{stem}.pcap", out / f"tls-{stem}.pcap", out / f"tls-{stem}.keylog"
    for twin, log in ((clear, None), (tls, keylog)):
        if twin.exists() and (log is None or log.exists()) and twin.stat().st_mtime >= src.stat().st_mtime:
            continue
        t0 = time.perf_counter()
        made = make_tls_twin(src, twin, log)
        print(f"capture: {twin} ({made['file_bytes'] / MB:.1f} MB, {made['connections']} connections) "
              f"in {time.perf_counter() - t0:.1f} s", flush=True)
    return clear, tls, keylog


def run(out: Path, size_mb: float, seed: int) -> dict:
    src, tls, keylog = ensure_tls_capture(out, size_mb, seed)
    decode_cpu(WARM_UP, WARM_UP.with_suffix(".keylog"))  # first calls compile and import; not timed
    plain = decode_cpu(src, None)
    keyed = decode_cpu(tls, keylog)
    nokey = decode_cpu(tls, None)
    tls_gb = tls.stat().st_size / GB
    res = {
        "plaintext_capture": str(src), "plaintext_bytes": src.stat().st_size, "tls_capture": str(tls),
        "tls_bytes": tls.stat().st_size, "plaintext": plain, "tls_keyed": keyed, "tls_no_key": nokey,
        "decrypt_cpu_s_per_gb": round((keyed["cpu_s"] - plain["cpu_s"]) / tls_gb, 2),
        "mb_per_s": {k: round(size / MB / r["cpu_s"], 1) for k, size, r in (
            ("plaintext", src.stat().st_size, plain), ("tls_keyed", tls.stat().st_size, keyed), ("tls_no_key", tls.stat().st_size, nokey))},
        "same_frames": keyed["rows"].get("frame") == plain["rows"].get("frame"),
        "all_decrypted": set(keyed["tls_status"]) == {"decrypted"},
    }
    return res


def print_report(res: dict) -> None:
    print(f"\nTLS decryption: plaintext {res['plaintext_bytes'] / MB:.0f} MB, its TLS twin {res['tls_bytes'] / MB:.0f} MB")
    for k in ("plaintext", "tls_keyed", "tls_no_key"):
        r = res[k]
        print(f"  {k:<11} {r['cpu_s']:8.1f} CPU s  {res['mb_per_s'][k]:6.1f} MB/s  frames {r['rows'].get('frame', 0)}  "
              f"tls_status {r['tls_status']}")
    print(f"  decryption cost: {res['decrypt_cpu_s_per_gb']} CPU s per GB of TLS capture "
          f"(same frames as in the clear: {res['same_frames']}, every connection decrypted: {res['all_decrypted']})")


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = run(out, args.size_mb, args.seed)
    path = out / f"bench-tls-{args.size_mb:g}.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    print_report(res)
    print(f"   figures: {path}")
    return 0 if res["same_frames"] and res["all_decrypted"] else 1
