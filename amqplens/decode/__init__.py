"""amqplens decoder core: bytes in, plain records out.

Python with numpy, pyarrow and (optionally) numba; no packet library: the capture
readers are its own (amqplens/decode/capture). Nothing in this package imports
pyspark, delta, great_expectations or the lake; ``tests/unit/test_layout.py`` enforces it.

``decode_capture(path)`` (``amqplens/decode/api.py``) decodes one capture file in this
process, with the pieces and the order of the ingest job's decode tasks.
"""

__version__ = "0.1.0"
__all__ = ["__version__", "decode_capture", "DecodedCapture", "DecodedConnection"]


def __getattr__(name: str):
    # on first use: a task that imports one codec module does not load the whole decoder for it
    if name in ("decode_capture", "DecodedCapture", "DecodedConnection"):
        from amqplens.decode import api

        return getattr(api, name)
    raise AttributeError(f"module 'amqplens.decode' has no attribute {name!r}")
