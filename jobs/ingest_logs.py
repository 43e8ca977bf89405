"""spark-submit entry of the ``ingest-logs`` stage: ``spark-submit --py-files amqplens-py-files.zip jobs/ingest_logs.py ARGS``
takes the arguments and layered config of ``amqplens ingest-logs`` (the stage: amqplens/stages.py)."""

from amqplens.cli import job_main

if __name__ == "__main__":
    job_main("ingest-logs")
