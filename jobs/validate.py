"""spark-submit entry of the ``validate`` stage: ``spark-submit --py-files amqplens-py-files.zip jobs/validate.py ARGS``
takes the arguments and layered config of ``amqplens validate`` (the stage: amqplens/stages.py)."""

from amqplens.cli import job_main

if __name__ == "__main__":
    job_main("validate")
