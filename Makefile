# amqplens: the two commands of the README are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Airflow has its own venv: its Spark provider pulls pyspark-client (a second distribution of the
# `pyspark` package, without the jars) and Airflow 3 brings SQLAlchemy 2.1, FastAPI and OpenTelemetry,
# none of which belong in the interpreter the executors run. Its workers only launch spark-submit.
AIRFLOW_VENV := .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
BENCH_SIZE_MB ?= 100
# the whole `amqplens run` at four sizes of real load (tools/gen_load.py); BENCH_SIZES= for one size
BENCH_SIZES ?= 100,300,1000,2000
BENCH_ARGS ?= --repeat 1
# then AMQP 1.0 under load (tools/gen_load10.py) at these sizes; BENCH10_SIZES= for none
BENCH10_SIZES ?= 100
DIST ?= dist
# the job-level fuzz campaign (tools/fuzz_jobs.py): FUZZ_MUTANTS mutants of every fixture family, FUZZ_BATCH per run
FUZZ_MUTANTS ?= 400
FUZZ_BATCH ?= 50
FUZZ_ARGS ?=

.PHONY: demo test test-slow test-all test-fast bench bench-tls fuzz dist docs clean java airflow

java:
	@command -v java >/dev/null 2>&1 || { echo "amqplens needs Java 17 for Spark: apt-get install -y openjdk-17-jre-headless (or set JAVA_HOME)"; exit 1; }

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# setuptools' editable build warns, as a banner on every install, that a folder named like the package may shadow it:
	@# amqplens/ here is that package (issue 36.10: install noise a newcomer cannot act on)
	PYTHONWARNINGS='ignore:Editable install' $(PY) -m pip install -q -e '.[dev,notebooks]'
	$(PY) -m amqplens.decode.v0_9_1.warm
	$(PY) -m amqplens.jobs.validate.columnar
	$(PY) -m amqplens.jvm_archive
	@touch $(STAMP)

$(AIRFLOW_STAMP): pyproject.toml
	@test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install -q --upgrade pip
	$(AIRFLOW_VENV)/bin/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['airflow']))" > $(AIRFLOW_VENV)/requirements.txt
	$(AIRFLOW_VENV)/bin/python -m pip install -q -r $(AIRFLOW_VENV)/requirements.txt
	@touch $(AIRFLOW_STAMP)

airflow: $(AIRFLOW_STAMP)

demo: java $(STAMP)
	$(VENV)/bin/amqplens demo --lake ./lake

# two workers, each test folder that shares a lake on one of them (tests/conftest.py groups them);
# PYTEST_ARGS adds options, e.g. PYTEST_ARGS=--durations=30. make test leaves out the tests that start JVMs of
# their own (tests/conftest.py SLOW: Airflow, spark-submit, CLI subprocesses, a cluster, a wheel): make test-slow
# runs those, make test-all both; .ci/run runs make test, then make test-slow.
# mypy (about 25 s of one core without its cache, as on a fresh clone) runs beside the tests' start (collection, the
# workers' JVMs) instead of before it; either failing fails make test.
test: java $(STAMP) $(AIRFLOW_STAMP)
	$(PY) -m ruff check --quiet amqplens jobs tools tests notebooks
	$(PY) -m mypy --no-error-summary amqplens & types=$$!; \
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow" $(PYTEST_ARGS); tests=$$?; \
	wait $$types; typed=$$?; [ $$typed -eq 0 ] || echo "make test: mypy failed (exit $$typed)"; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

test-slow: java $(STAMP) $(AIRFLOW_STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup -m slow $(PYTEST_ARGS)

test-all: test test-slow

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not spark and not e2e"

bench: java $(STAMP)
	$(PY) -m tools.bench $(if $(BENCH_SIZES),--sizes $(BENCH_SIZES),--size-mb $(BENCH_SIZE_MB)) $(BENCH_ARGS)
	$(if $(BENCH10_SIZES),$(PY) -m tools.bench --profile load10 --sizes $(BENCH10_SIZES) $(BENCH_ARGS))

# TLS decryption cost per GB on the TLS twin (about 307 MB) of a 320 MB capture (tools/bench_tls.py)
bench-tls: $(STAMP)
	$(PY) -m tools.bench --tls --size-mb 320

docs: $(STAMP)
	$(PY) -m tools.gen_table_docs

# the whole `amqplens run` over seeded field-class mutants of every fixture family (make test runs a few of them:
# tests/e2e/test_fuzz_jobs.py); FUZZ_ARGS e.g. "--seed 7 --skip-classes record_time_years --pool fast"
fuzz: java $(STAMP)
	$(PY) -m tools.fuzz_jobs --mutants $(FUZZ_MUTANTS) --batch $(FUZZ_BATCH) $(FUZZ_ARGS)

dist: $(STAMP)
	$(PY) -m pip wheel -q --no-deps -w $(DIST) .
	$(PY) -c "import pathlib, zipfile; z = zipfile.ZipFile('$(DIST)/amqplens-py-files.zip', 'w', zipfile.ZIP_DEFLATED); \
	  [z.write(p) for d in ('amqplens', 'conf') for p in sorted(pathlib.Path(d).rglob('*')) \
	   if p.is_file() and '__pycache__' not in p.parts and p.name != 'local.yaml']; z.close()"

clean:
	rm -rf lake report dist build *.egg-info bench-out
