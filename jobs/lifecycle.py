"""spark-submit entry of the ``lifecycle`` stage: ``spark-submit --py-files amqplens-py-files.zip jobs/lifecycle.py ARGS``
takes the arguments and layered config of ``amqplens lifecycle`` (the stage: amqplens/stages.py)."""

from amqplens.cli import job_main

if __name__ == "__main__":
    job_main("lifecycle")
