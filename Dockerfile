# specfleet on the official vLLM OpenAI server image, pinned to the `gpu` extra's vLLM
# (pyproject: vllm>=0.33,<0.34; 0.33.0 is the 0.33 release on PyPI).
#
# One image, three uses. It has no ENTRYPOINT (the base image's `vllm serve` entrypoint is
# cleared), so every caller's command runs as given:
#   - Ray head/worker under KubeRay: the operator runs `ray start ...` in the container
#     (infra/ray/raycluster.yaml).
#   - Ray node under the cluster launcher: `docker run ... IMAGE bash`, then `ray start`
#     (infra/ray/cluster-launcher.yaml).
#   - One-shot sweep runner: `docker run --gpus all IMAGE` runs CMD, `specfleet sweep
#     $SPECFLEET_CONFIG`; `docker run IMAGE specfleet ...` runs any other command.
# Arms start their own servers (`python -m vllm.entrypoints.openai.api_server`) inside Ray tasks.
#
# Build: docker build -t specfleet:0.1.0 .        Lint: hadolint Dockerfile
FROM vllm/vllm-openai:v0.33.0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ARG RAY_VERSION=2.60.0

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SPECFLEET_REPO=/opt/specfleet \
    SPECFLEET_PROMPTS_DIR=/opt/specfleet/configs/prompts \
    SPECFLEET_CONFIG=configs/llama70b-h200.yaml \
    SPECFLEET_CACHE_DIR=/data/fixtures \
    HF_HOME=/data/hf-cache \
    RAY_TMPDIR=/data/ray \
    RAY_USAGE_STATS_ENABLED=0

RUN groupadd --gid 10001 specfleet \
    && useradd --uid 10001 --gid 10001 --create-home --shell /bin/bash specfleet \
    && mkdir -p /data/results /data/fixtures /data/hf-cache /data/ray \
    && chown -R 10001:10001 /data

COPY --chown=specfleet:specfleet . /opt/specfleet
WORKDIR /opt/specfleet

# Install specfleet into the interpreter that already has vLLM, without touching vLLM:
# the image's vLLM, torch, CUDA kernels, transformers and its web stack (fastapi,
# starlette, pydantic) are pinned as constraints, so pip picks Prefect and MLflow
# versions that fit them (an unconstrained install upgrades fastapi past vLLM's pin).
# Ray gets its `default` extra (dashboard and agent, which KubeRay's probes use) at the
# version every node of the cluster runs.
RUN python3 -m pip list --format=freeze \
        | grep -iE '^(vllm|torch|torchvision|torchaudio|triton|xformers|flashinfer-python|transformers|tokenizers|huggingface-hub|fastapi|starlette|pydantic|pydantic-core|numpy)==' \
        > image-pins.txt \
    && grep -iq '^vllm==0\.33\.' image-pins.txt \
    && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --constraint image-pins.txt \
        "ray[default]==${RAY_VERSION}" /opt/specfleet \
    && python3 -m pip list --format=freeze | grep -iE '^vllm==0\.33\.' \
    && python3 -c "import vllm, ray, prefect, mlflow, specfleet_flows.sweep, specfleet_tasks.cluster.stage" \
    && rm -rf build ./*.egg-info image-pins.txt

# Numeric, so Kubernetes can check runAsNonRoot.
USER 10001:10001

# Cleared on purpose: the base image's `vllm serve` would swallow `ray start` and `bash`.
ENTRYPOINT []

# Results (`results/`) and the default MLflow store land under the working directory;
# mount a volume there or set SPECFLEET_RESULTS_S3 and MLFLOW_TRACKING_URI.
CMD ["bash", "-c", "exec specfleet sweep \"${SPECFLEET_CONFIG}\""]
