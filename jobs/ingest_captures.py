"""spark-submit entry of the ``ingest-captures`` stage: ``spark-submit --py-files amqplens-py-files.zip jobs/ingest_captures.py ARGS``
takes the arguments and layered config of ``amqplens ingest-captures`` (the stage: amqplens/stages.py)."""

from amqplens.cli import job_main

if __name__ == "__main__":
    job_main("ingest-captures")
