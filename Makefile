# amqplens: the two commands of the README are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_SIZE_MB ?= 100

.PHONY: demo test test-fast bench dist docs clean java

java:
	@command -v java >/dev/null 2>&1 || { echo "amqplens needs Java 17 for Spark: apt-get install -y openjdk-17-jre-headless (or set JAVA_HOME)"; exit 1; }

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,notebooks]'
	@touch $(STAMP)

demo: java $(STAMP)
	$(VENV)/bin/amqplens demo --lake ./lake

test: java $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not spark and not e2e"

bench: java $(STAMP)
	$(PY) -m tools.bench --size-mb $(BENCH_SIZE_MB)

docs: $(STAMP)
	$(PY) -m tools.gen_table_docs

dist: $(STAMP)
	$(PY) -m pip wheel -q --no-deps -w dist .
	$(PY) -c "import pathlib, zipfile; z = zipfile.ZipFile('dist/amqplens-py-files.zip', 'w', zipfile.ZIP_DEFLATED); \
	  [z.write(p) for d in ('amqp_decode', 'jobs', 'schemas') for p in sorted(pathlib.Path(d).rglob('*')) if p.is_file() and '__pycache__' not in p.parts]; z.close()"

clean:
	rm -rf lake report dist build *.egg-info bench-out
