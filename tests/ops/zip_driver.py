"""A spark-submit driver the tests copy out of the source tree: ``zip_driver.py <amqplens args>``.

It prints where the driver and two executor tasks imported the packages from
(the ``--py-files`` zip, or the source tree by mistake), then runs the
``amqplens`` command line in this spark-submit's session.
"""

import sys

import amqplens
import amqplens.decode
from amqplens.cli import console
from pyspark.sql import SparkSession


def _where(_):
    import amqplens.decode

    return amqplens.decode.__file__


if __name__ == "__main__":
    sc = SparkSession.builder.getOrCreate().sparkContext
    print("DRIVER_IMPORTS", amqplens.__file__, amqplens.decode.__file__)
    print("EXECUTOR_IMPORTS", *sc.parallelize(range(2), 2).map(_where).collect())
    console(sys.argv[1:])  # the run's exit code, through os._exit like every entry
