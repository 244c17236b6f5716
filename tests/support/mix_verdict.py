"""The verdict at the traffic mix on synthetic sweeps (``tests/support/synthetic_sweep.py``): a
traffic block, a config with its demand, and the hand-computed two-class, two-load case."""

from specfleet.contract import SweepConfig
from specfleet.verdicts.mix import MixVerdict
from tests.support.synthetic_sweep import bracketed, config


def traffic(classes: str, loads: str, basis: str = "tokens") -> str:
    return f"traffic:\n  share_basis: {basis}\n  prompt_classes: {{{classes}}}\n  concurrency: {{{loads}}}\n"


def with_demand(cfg: SweepConfig, demand: float) -> SweepConfig:
    return cfg.model_copy(update={"hardware": cfg.hardware.model_copy(update={"peak_demand_tokens_per_s": demand})})


def verdict(cfg: SweepConfig, base: dict[tuple[str, float], float], cand: dict[tuple[str, float], float],
            arm: str = "draft-k2", **kw: object) -> MixVerdict:
    """The arm's verdict; the baseline measured at ``base`` by both its servers (no run-to-run spread)."""
    def rate(table: dict[tuple[str, float], float]) -> object:
        return lambda i: table[(i.prompt_class, i.load_value)]
    sweep = bracketed(cfg, rate(base), rate(base), {"draft-k2": rate(cand), "draft-k4": rate(base)},
                      **kw)  # type: ignore[arg-type]
    return next(v for v in sweep.analyse().mix if v.name == arm)


# Two classes x two loads, 25 % of tokens each; demand 1999 tokens/s (a hair under the exact multiples).
#   cell          baseline  candidate
#   code  c1        100       200
#   code  c4        400       400
#   chat  c1        200       400
#   chat  c4        400       400
# baseline T = 1 / (0.25/100 + 0.25/400 + 0.25/200 + 0.25/400) = 200 -> ceil(2000/200) = 10 replicas
# candidate T = 1 / (0.25/200 + 0.25/400 + 0.25/400 + 0.25/400) = 320 -> ceil(6.25) = 7: saving 0.3
# code alone: 160 -> 13 vs 266.7 -> 8; chat alone: 266.7 -> 8 vs 400 -> 5.
HAND = traffic("code: 0.5, chat: 0.5", "1: 0.5, 4: 0.5")
BASE = {("code", 1.0): 100.0, ("code", 4.0): 400.0, ("chat", 1.0): 200.0, ("chat", 4.0): 400.0}
CAND = {("code", 1.0): 200.0, ("code", 4.0): 400.0, ("chat", 1.0): 400.0, ("chat", 4.0): 400.0}


def hand_config(text: str = HAND, demand: float = 1999, loads: tuple[int, ...] = (1, 4),
                classes: tuple[str, ...] = ("code", "chat")) -> SweepConfig:
    return with_demand(config(classes=classes, loads=loads, extra=text), demand)
