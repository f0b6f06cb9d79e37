# The two commands the README promises. Everything is installed into .venv and node_modules.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000

.PHONY: serve build test install install-test chromium bench lighthouse clean check-exports

serve: install
	$(PY) build.py --serve --port $(PORT)

build: install
	$(PY) build.py

test: install-test chromium
	$(PY) -m pytest -q

install: $(VENV)/.installed node_modules/.installed

install-test: install $(VENV)/.installed-test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install --quiet ".[test]"
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# Browser tests need Chromium; Playwright cannot download one here, so use Debian's.
chromium:
	@bash scripts/ensure-chromium.sh

bench: install-test chromium
	$(PY) bench/browser.py

# Lighthouse (desktop and mobile presets) against the built site, served as --serve does.
lighthouse: install-test chromium bench/node_modules/.installed
	$(PY) bench/lighthouse.py

bench/node_modules/.installed: bench/package.json bench/package-lock.json
	npm ci --prefix bench --no-audit --no-fund
	touch $@

# The exports run through the real tools (tests/models/test_exports_real_tools.py): torchtitan
# 0.2.2 on a CPU-only torch and Megatron-LM core_v0.19.0's source tree, in .venv-exports and
# .tools/ (ignored by git), never in .venv. torch goes first, pinned, so torchtitan's "torch>=2"
# pulls nothing newer: on this project's machines pip takes 2.13.0's CPU build from local disk
# (elsewhere, point pip at PyTorch's CPU wheels with PIP_INDEX_URL to avoid a CUDA build).
EXPORTS_VENV := .venv-exports
EXPORTS_PY := $(EXPORTS_VENV)/bin/python
MEGATRON_TGZ ?= ../shared/tools/megatron-lm-core_v0.19.0.tgz
MEGATRON_LM ?= .tools/megatron/mlm

check-exports: $(EXPORTS_VENV)/.installed
	@if [ ! -d "$(MEGATRON_LM)/megatron" ] && [ -f "$(MEGATRON_TGZ)" ]; then \
		mkdir -p .tools/megatron && tar -xzf "$(MEGATRON_TGZ)" -C .tools/megatron; fi
	MEGATRON_LM=$(abspath $(MEGATRON_LM)) $(EXPORTS_PY) -m pytest -q -rs -p no:cacheprovider --disable-warnings \
		tests/models/test_exports_real_tools.py

$(EXPORTS_VENV)/.installed:
	$(PYTHON) -m venv $(EXPORTS_VENV)
	$(EXPORTS_PY) -m pip install --quiet torch==2.13.0
	$(EXPORTS_PY) -m pip install --quiet torchtitan==0.2.2 triton==3.9.0 pytest==9.2.0 hypothesis==6.170.17
	touch $@

clean:
	rm -rf dist .pytest_cache
