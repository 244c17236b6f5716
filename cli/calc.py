"""``specfleet calc``: the seed's worksheet and calculator from the command line."""

import json
import math
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from specfleet.economics.cost import fleet_cost, kv_capacity
from specfleet.economics.theory import (
    ModelledAlpha,
    best_k,
    breakeven_alpha,
    net_speedup,
    speedup_grid,
    tokens_per_step,
)
from specfleet.errors import InputError
from specfleet.stats.bootstrap import speedup_text
from specfleet_cli.errors import exit_on_error

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()

Json = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
Alpha = Annotated[float, typer.Option("--alpha", help="Modelled per-position acceptance (not telemetry r).")]
K = Annotated[int, typer.Option("-k", "--num-speculative-tokens", help="Speculated tokens per step.")]
C = Annotated[float, typer.Option("-c", "--draft-cost-ratio", help="Draft step time / target step time.")]
V = Annotated[float, typer.Option("-v", "--verify-cost-ratio",
                                  help="Extra verification time per proposed token / target step time.")]


def _emit(as_json: bool, payload: dict[str, object], text: str) -> None:
    if as_json:
        print(json.dumps(payload))
    else:
        console.print(text)


@app.command()
def speedup(alpha: Alpha, k: K, c: C, v: V = 0.0, as_json: Json = False) -> None:
    """Net speedup S = E / (1 + k(c + v)), with E the expected tokens per step."""
    with exit_on_error():
        a = ModelledAlpha(alpha)
        s, e = net_speedup(a, k, c, v), tokens_per_step(a, k)
    _emit(as_json, {"speedup": s, "tokens_per_step": e},
          f"S = {speedup_text(s)} (E = {e:.3f} tokens per step; alpha {alpha:g}, k {k}, c {c:g}, v {v:g})")


@app.command()
def breakeven(k: K, c: C, v: V = 0.0, as_json: Json = False) -> None:
    """The modelled alpha at which S = 1 (solved to 1e-9)."""
    with exit_on_error():
        alpha = breakeven_alpha(k, c, v)
    # The seed quotes the smallest two-decimal alpha that breaks even (0.574 -> 0.58).
    up = None if alpha is None else math.ceil(round(alpha * 100, 9)) / 100
    text = ("no alpha in [0, 1] breaks even: k(c + v) >= k" if alpha is None
            else f"break-even alpha = {alpha:.4f} (>= {up:.2f} at two decimals; k {k}, c {c:g}, v {v:g})")
    _emit(as_json, {"alpha": alpha, "alpha_two_decimals_up": up}, text)


@app.command("best-k")
def best_k_command(
    alpha: Alpha, c: C, v: V = 0.0,
    k_max: Annotated[int, typer.Option("--k-max", help="Largest k tried.")] = 16,
    as_json: Json = False,
) -> None:
    """The k in 1..k-max with the largest modelled speedup."""
    with exit_on_error():
        k, s = best_k(ModelledAlpha(alpha), c, v, k_max)
    _emit(as_json, {"k": k, "speedup": s}, f"best k = {k}: S = {speedup_text(s)} (alpha {alpha:g}, c {c:g}, v {v:g})")


def parse_alphas(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise InputError(f"--alphas: expected comma-separated numbers like 0.5,0.6 (got {text!r})") from None


def parse_ks(text: str) -> list[int]:
    """``1-7``, ``1,2,4`` or ``1-3,5``: positive integers, ranges inclusive."""
    ks: list[int] = []
    for part in text.split(","):
        bounds = part.strip().split("-")
        if len(bounds) > 2 or not all(b.strip().isdigit() for b in bounds):
            raise InputError(f"--ks: expected ranges or integers like 1-7 or 1,2,4 (got {text!r})")
        low, high = int(bounds[0]), int(bounds[-1])
        if low < 1 or high < low:
            raise InputError(f"--ks: {part.strip()!r} is not a rising range of positive integers")
        ks.extend(range(low, high + 1))
    return sorted(set(ks))


@app.command()
def grid(
    c: C, v: V = 0.0,
    alphas: Annotated[str, typer.Option("--alphas", help="e.g. 0.5,0.6,0.7")] = "0.5,0.6,0.7,0.8,0.9",
    ks: Annotated[str, typer.Option("--ks", help="e.g. 1-7 or 1,2,4")] = "1-7",
    as_json: Json = False,
) -> None:
    """S over alpha x k (the layout of seed Table 3)."""
    with exit_on_error():
        alpha_list, k_list = parse_alphas(alphas), parse_ks(ks)
        points = speedup_grid(alpha_list, k_list, c, v)
    if as_json:
        print(json.dumps({"rows": [{"alpha": p.alpha, "k": p.k, "speedup": p.speedup} for p in points]}))
        return
    table = Table(title=f"Net speedup S (c {c:g}, v {v:g})")
    table.add_column("alpha")
    for k in k_list:
        table.add_column(f"k={k}", justify="right")
    for a in alpha_list:
        table.add_row(f"{a:g}", *(f"{p.speedup:.2f}" for p in points if p.alpha == a))
    console.print(table)


@app.command()
def fleet(
    gpus_per_replica: Annotated[int, typer.Option("--gpus-per-replica")],
    gpu_hour_usd: Annotated[float, typer.Option("--gpu-hour-usd")],
    qualified_tps: Annotated[float, typer.Option("--qualified-tps",
                                                 help="SLO-qualified tokens/s one replica sustains.")],
    demand_tps: Annotated[float, typer.Option("--demand-tps", help="Peak demand, qualified tokens/s.")],
    served_tps: Annotated[float | None, typer.Option("--served-tps", help="Defaults to demand.")] = None,
    as_json: Json = False,
) -> None:
    """Whole-replica fleet cost per million SLO-qualified tokens, and the unrounded ideal."""
    with exit_on_error():
        cost = fleet_cost(gpus_per_replica, gpu_hour_usd, qualified_tps, demand_tps, served_tps)
    _emit(as_json, {
        "replicas": cost.replicas, "ideal_replicas": cost.ideal_replicas,
        "fleet_usd_per_hour": cost.fleet_usd_per_hour, "cost_per_million_usd": cost.cost_per_million_usd,
        "ideal_cost_per_million_usd": cost.ideal_cost_per_million_usd,
    }, f"{cost.replicas} replicas ({cost.ideal_replicas:.3g} ideal), ${cost.fleet_usd_per_hour:.2f}/h: "
       f"${cost.cost_per_million_usd:.2f} per million (ideal ${cost.ideal_cost_per_million_usd:.3f})")


@app.command()
def kv(
    kv_memory_gb: Annotated[float, typer.Option("--kv-memory-gb", help="KV pool, GB = 1e9 bytes.")],
    kib_per_token: Annotated[float, typer.Option("--kib-per-token", help="KV per token, KiB = 1024 bytes.")],
    draft_weights_gb: Annotated[float | None, typer.Option("--draft-weights-gb")] = None,
    kib_per_token_with_draft: Annotated[float | None, typer.Option("--kib-per-token-with-draft")] = None,
    as_json: Json = False,
) -> None:
    """Tokens the KV pool holds, with and without the draft's weights and per-token KV."""
    with exit_on_error():
        cap = kv_capacity(kv_memory_gb, kib_per_token, draft_weights_gb, kib_per_token_with_draft)
    text = f"{cap.tokens:,} tokens"
    if cap.tokens_with_draft is not None and cap.capacity_loss is not None:
        text += f"; with the draft {cap.tokens_with_draft:,} ({cap.capacity_loss:.1%} less)"
    _emit(as_json, {"tokens": cap.tokens, "tokens_with_draft": cap.tokens_with_draft,
                    "capacity_loss": cap.capacity_loss}, text)
