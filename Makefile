# Two entry points for a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.edgebuild-installed
EXAMPLE ?= examples/shapes-detector
TARGET ?= orin

.PHONY: setup setup-zoo demo test lint docs lock clean

# Every package comes from requirements.lock (versions and hashes; `make lock` refreshes it), the
# same on every machine and every week; edgebuild itself is installed over it, adding nothing.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	touch $@

setup: $(STAMP)  ## create the venv and install edgebuild (CPU build host) from the lock

ZOO_STAMP := $(VENV)/.edgebuild-zoo-installed
$(ZOO_STAMP): $(STAMP) requirements-zoo.lock
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements-zoo.lock
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
test: lint docs $(ZOO_STAMP)  ## lint, build the docs, then every test (marked tests skip only when their resource is missing)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=15

# Refresh the locks: newest releases that pyproject.toml's ranges, requirements-host.txt and
# requirements-zoo.txt allow, resolved on this Python. Commit a refresh on its own, so CI tests it alone.
LOCK_TOOLS := $(VENV)-lock
lock:  ## refresh requirements.lock and requirements-zoo.lock (versions and hashes)
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/pip install --quiet pip-tools==7.7.0 uv==0.13.10
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_TOOLS)/bin/pip-compile --quiet --upgrade --generate-hashes \
	    --allow-unsafe --strip-extras --no-emit-find-links --no-emit-index-url --no-emit-trusted-host \
	    --extra dev --extra farm --extra docs -o requirements.lock pyproject.toml requirements-host.txt
	( echo '# Locked with hashes from requirements-zoo.txt by `make lock`; installed WITHOUT dependencies (see there).'; \
	  $(LOCK_TOOLS)/bin/uv pip compile --quiet --upgrade --no-deps --generate-hashes --no-header \
	    requirements-zoo.txt ) > requirements-zoo.lock.new
	mv requirements-zoo.lock.new requirements-zoo.lock

clean:
	rm -rf $(VENV) $(VENV)-lock build examples/*/build .pytest_cache .ruff_cache
