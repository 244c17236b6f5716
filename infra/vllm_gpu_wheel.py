"""Fetch vLLM's GPU wheel and unpack it, without installing it, for the GPU-parser tests.

The tests (``tests/integration/test_gpu_parser.py``) import the unpacked wheel over the CPU
environment with ``VLLM_TARGET_DEVICE=cpu`` and put every argument list specfleet renders for
a shipped GPU config through that build's own server parser and engine config; no GPU and no
install is needed, and the environment ``make`` builds is left as it is. Each version is fetched
once (``pip download --no-deps``, about 340 MB) and unpacked under ``CACHE_DIR/vllm-gpu/VERSION``;
a directory with its stamp is reused, one without (a fetch that was cut off) is made again.

    python infra/vllm_gpu_wheel.py CACHE_DIR [VERSION ...]    (default: VERSIONS)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

STAMP = ".unpacked-stamp"
VERSIONS = ("0.33.0", "0.34.0")
"""The GPU builds the parser tests cover: the pinned minor's first release and the next minor's."""


def wheel_dir(cache_dir: Path, version: str) -> Path:
    """Where ``version``'s unpacked wheel lives (importable with this directory first on sys.path)."""
    return cache_dir / "vllm-gpu" / version


def fetch(cache_dir: Path, version: str) -> Path:
    """``version``'s wheel unpacked under ``cache_dir``: fetched and unpacked unless already there."""
    target = wheel_dir(cache_dir, version)
    if (target / STAMP).is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as download:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                        f"vllm=={version}", "-d", download], check=True)
        (wheel,) = Path(download).glob("vllm-*.whl")
        partial = target.with_name(f"{version}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(partial)
    partial.rename(target)
    (target / STAMP).write_text(f"vllm=={version}\n", encoding="utf-8")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache_dir", type=Path)
    parser.add_argument("versions", nargs="*", default=list(VERSIONS))
    options = parser.parse_args()
    for version in options.versions:
        print(f"vLLM {version} GPU wheel: {fetch(options.cache_dir, version)}", flush=True)


if __name__ == "__main__":
    main()
