"""amqplens decoder core: bytes in, plain records out.

Pure Python (stdlib, dpkt, numpy, pyarrow). Nothing in this package imports
pyspark, delta or great_expectations; ``tests/test_purity.py`` enforces it.
"""

__version__ = "0.1.0"
