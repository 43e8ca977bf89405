"""spark-submit entry of the ``findings`` stage: ``spark-submit --py-files amqplens-py-files.zip jobs/findings.py ARGS``
takes the arguments and layered config of ``amqplens findings`` (the stage: amqplens/stages.py)."""

from amqplens.cli import job_main

if __name__ == "__main__":
    job_main("findings")
