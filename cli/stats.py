"""``specfleet stats``: statistical checks on stored samples."""

import json
from collections import defaultdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from specfleet.errors import InputError
from specfleet.stats.equivalence import stochastic_equivalence
from specfleet_cli.errors import exit_on_error

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()


@app.callback()
def stats() -> None:
    """Statistical checks on stored samples."""


def read_samples(path: str) -> dict[str, list[list[int]]]:
    """JSONL, one sampled sequence a line: ``{"prompt_id": str, "tokens": [int, ...]}``."""
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{path}: no such file")
    samples: dict[str, list[list[int]]] = defaultdict(list)
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("prompt_id"), str):
                raise InputError(f"{path}:{number}: expected an object with a string 'prompt_id'")
            tokens = row.get("tokens")
            if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                                       for t in tokens):
                raise InputError(f"{path}:{number}: 'tokens' must be a list of integers")
            samples[row["prompt_id"]].append(tokens)
    if not samples:
        raise InputError(f"{path}: no samples")
    return dict(samples)


@app.command()
def equivalence(
    a: Annotated[str, typer.Option("--a", help="Arm A samples (JSONL).")],
    b: Annotated[str, typer.Option("--b", help="Arm B samples (JSONL).")],
    significance: Annotated[float, typer.Option("--significance")] = 0.05,
    power: Annotated[float, typer.Option("--power", help="Target power of the design.")] = 0.8,
    min_tv: Annotated[float, typer.Option("--min-tv", help="Minimum detectable total variation.")] = 0.1,
    permutations: Annotated[int, typer.Option("--permutations")] = 999,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Two-sample test that arms A and B sample the same token sequences, prompt by prompt."""
    with exit_on_error():
        result = stochastic_equivalence(read_samples(a), read_samples(b), significance=significance,
                                        power=power, min_detectable_tv=min_tv, permutations=permutations,
                                        seed=seed)
    if as_json:
        print(json.dumps(result.model_dump(mode="json")))
        return
    verdict = "[red]distributions differ[/red]" if result.reject else "no difference found"
    console.print(
        f"{verdict}: p = {result.p_value:.4f} at significance {result.significance:g} "
        f"({result.test}; n_a {result.n_a}, n_b {result.n_b} over {result.prompts} prompts)"
    )
    if not result.adequately_powered:
        console.print(f"[yellow]underpowered[/yellow]: {result.min_n_per_arm_per_prompt} samples per arm "
                      f"per prompt, {result.n_required_per_arm_per_prompt} needed to detect TV "
                      f"{result.min_detectable_tv:g} with power {result.power:g}")
