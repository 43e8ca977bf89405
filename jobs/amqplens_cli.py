"""spark-submit entry of the whole ``amqplens`` command line (any subcommand, ``run`` included):
``spark-submit --py-files amqplens-py-files.zip jobs/amqplens_cli.py run --input ... --lake ...``."""

from amqplens.cli import console

if __name__ == "__main__":
    console()
