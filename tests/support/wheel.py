"""specfleet's wheel, built as ``pip wheel .`` builds it from a copy of the working tree's files
(tracked and new, none that git ignores), so the build leaves nothing in the checkout; and the wheel
installed without dependencies into a folder, which, first on ``PYTHONPATH``, is what this
environment holds after ``pip install .``: importlib.metadata takes the first distribution of a
name on the path, so its metadata hides the shared install's."""

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(out: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    source = out / "source"
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_symlink():  # specfleet_tasks -> tasks and the other installed names
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).symlink_to((ROOT / name).readlink())
        elif (ROOT / name).is_file():  # a file deleted but still in the index is not the tree's
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out / "dist"), str(source))
    [wheel] = (out / "dist").glob("specfleet-*.whl")
    return wheel


def install_wheel(wheel: Path, target: Path) -> Path:
    _pip("install", "--no-deps", "--no-index", "--target", str(target), str(wheel))
    return target


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def top_level_modules(wheel: Path) -> set[str]:
    """The importable names the wheel installs (its metadata folders aside)."""
    tops = {name.split("/")[0] for name in wheel_files(wheel)}
    return {top.removesuffix(".py") for top in tops if not top.endswith((".dist-info", ".data"))}


def entry_point_groups(wheel: Path) -> dict[str, dict[str, str]]:
    """The wheel's own entry points, by group (its ``*.dist-info/entry_points.txt``)."""
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(name).decode()
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep names as written
    parser.read_string(text)
    return {group: dict(parser[group]) for group in parser.sections()}


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "-q", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
