"""amqplens decoder core: bytes in, plain records out.

Python with numpy, pyarrow and (optionally) numba; no packet library: the capture
readers are its own (amqplens/decode/capture). Nothing in this package imports
pyspark, delta, great_expectations or the lake; ``tests/unit/test_layout.py`` enforces it.

``decode_capture(path)`` (``amqplens/decode/api.py``) decodes one capture file in this
process, with the pieces and the order of the ingest job's decode tasks; ``reassemble(path, factory)``
gives each selected connection's TCP streams to a consumer of your own, without a codec.
"""

__version__ = "0.1.0"
_API = ("decode_capture", "reassemble", "DecodedCapture", "DecodedConnection")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    # on first use: a task that imports one codec module does not load the whole decoder for it
    if name in _API:
        from amqplens.decode import api

        return getattr(api, name)
    raise AttributeError(f"module 'amqplens.decode' has no attribute {name!r}")
