# Two entry points for a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.edgebuild-installed
EXAMPLE ?= examples/shapes-detector
TARGET ?= orin

.PHONY: setup setup-zoo demo test lint docs clean

$(STAMP): pyproject.toml requirements-host.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-host.txt -e '.[dev,farm,docs]'
	touch $@

setup: $(STAMP)  ## create the venv and install edgebuild (CPU build host)

ZOO_STAMP := $(VENV)/.edgebuild-zoo-installed
$(ZOO_STAMP): $(STAMP) requirements-zoo.txt
	$(BIN)/pip install --quiet --no-deps -r requirements-zoo.txt
	touch $@

setup-zoo: $(ZOO_STAMP)  ## the zoo tests' torchvision, timm and ultralytics (without their dependencies)

demo: $(STAMP)  ## compile the bundled shapes example for every Orin group of its fleet
	$(BIN)/edgebuild compile --target $(TARGET) --project $(EXAMPLE)

lint: $(STAMP)
	$(BIN)/ruff check edgebuild tests examples benchmarks
	$(BIN)/vermin --no-tips --violations --target=3.8- --eval-annotations --backport dataclasses edgebuild/runtime edgebuild/errors.py edgebuild/__init__.py
	$(BIN)/mypy  # the package, under pyproject.toml's [tool.mypy]

docs: $(STAMP)  ## the documentation site (docs/, mkdocs.yml), strictly: any warning fails; built outside the repo
	$(BIN)/mkdocs build --strict --site-dir "$${TMPDIR:-/tmp}/edgebuild-site"

PYTEST_WORKERS ?= 2
test: lint docs  ## lint, build the docs, then every test (marked tests skip only when their resource is missing)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=15

clean:
	rm -rf $(VENV) build examples/*/build .pytest_cache .ruff_cache
