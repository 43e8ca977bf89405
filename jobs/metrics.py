"""spark-submit entry of the ``metrics`` stage: ``spark-submit --py-files amqplens-py-files.zip jobs/metrics.py ARGS``
takes the arguments and layered config of ``amqplens metrics`` (the stage: amqplens/stages.py)."""

from amqplens.cli import job_main

if __name__ == "__main__":
    job_main("metrics")
