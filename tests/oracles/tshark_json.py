"""tshark's ``-T json`` dissection, read for the codec oracles (tests/v0_9_1, tests/v1_0, tests/v0_10).

One packet may hold several AMQP frames, and tshark then repeats the ``amqp``
key in one JSON object; ``json.loads`` would keep only the last. ``packets``
reads the JSON with a hook that keeps every key as a list of ``(key, value)``
pairs, and yields per packet with a TCP layer that layer and all its ``amqp``
layers, in order. ``get`` looks a key up in such a list of pairs.
"""

from __future__ import annotations

import json
import shutil

PREFS = ["-o", "tcp.reassemble_out_of_order:TRUE"]


def available() -> bool:
    return shutil.which("tshark") is not None


def _keep_pairs(pairs):
    return pairs  # keep every key, repeated ones included


def get(pairs, key):
    for k, v in pairs:
        if k == key:
            return v
    return None


def walk_amqp(pairs, out: list) -> None:
    """Append every ``amqp`` layer below ``pairs`` to ``out``, in document order."""
    for k, v in pairs:
        if k == "amqp" and isinstance(v, list):
            out.append(v)
        elif isinstance(v, list) and v and isinstance(v[0], tuple):
            walk_amqp(v, out)


def packets(json_text: str):
    """``(tcp layer, [amqp layer, ...])`` per packet of ``-T json`` output that has a TCP layer."""
    for pkt in json.loads(json_text, object_pairs_hook=_keep_pairs):
        layers = get(get(pkt, "_source"), "layers")
        tcp = get(layers, "tcp")
        if tcp is None:
            continue
        found: list = []
        walk_amqp(layers, found)
        yield tcp, found
