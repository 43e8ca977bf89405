"""spark-submit entry of the ``report`` stage: ``spark-submit --py-files amqplens-py-files.zip jobs/report.py ARGS``
takes the arguments and layered config of ``amqplens report`` (the stage: amqplens/stages.py)."""

from amqplens.cli import job_main

if __name__ == "__main__":
    job_main("report")
