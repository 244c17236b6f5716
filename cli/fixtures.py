"""``specfleet fixtures``: build the tiny target, draft and tokenizer the CPU demo runs on."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from specfleet_cli.errors import exit_on_error

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
progress_console = Console(stderr=True, soft_wrap=True, highlight=False)


@app.callback()
def main() -> None:
    """Fixture models trained here from a seeded corpus (no downloads)."""


@app.command()
def build(
    as_json: Annotated[bool, typer.Option("--json", help="Print the fixture dirs as JSON.")] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="Cache root (default: $SPECFLEET_CACHE_DIR or ~/.cache/specfleet)."),
    ] = None,
) -> None:
    """Build the tokenizer, target and distilled draft, or reuse a cached build."""
    from specfleet_tasks.fixtures.build import build_fixtures
    from specfleet_tasks.fixtures.progress import BuildDisplay

    with exit_on_error(), BuildDisplay(progress_console) as display:
        paths = build_fixtures(cache_dir, progress=display)
    if as_json:
        print(json.dumps({"target": str(paths.target), "draft": str(paths.draft), "tokenizer": str(paths.tokenizer)}))
        return
    state = "reused" if paths.reused else "built"
    Console(soft_wrap=True, highlight=False).print(
        f"[green]fixtures {state}[/green] {paths.target.parent} ({paths.content_hash[:12]})"
    )
