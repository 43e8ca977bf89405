"""amqplens decoder core: bytes in, plain records out.

Python with numpy, pyarrow and (optionally) numba; no packet library: the capture
readers are its own (amqp_decode/capture). Nothing in this package imports
pyspark, delta or great_expectations; ``tests/test_purity.py`` enforces it.
"""

__version__ = "0.1.0"
