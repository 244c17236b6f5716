"""Which cells a budgeted sweep measures first (issue 18): those whose measurement can still
change a decision.

Order, first to last:
1. cells of the baseline (every decision compares against them); first measurements before repeats;
2. cells the entry gate needs (a class and load with a share of the traffic mix), heaviest
   share first; cells outside the mix after them;
3. within those, speculative cells nearest break-even first: the predicted speedup's distance
   from 1 in units of the sweep's noise floor, ``|ln s| / ln(1 + noise)``. Before any sweep (the
   prior: no acceptance measured, no noise floor) the distance is unknown and the mix share
   alone orders them; lower k first on ties, as a k policy needs its small k.

With ``analysis.nights``, the speculative cells whose claims the previous look decided (adopt or
reject) come after every other speculative cell: their verdicts are kept whatever they measure, so
the budget goes to the claims still inconclusive.

Predictions only order the work; no decision reads them.
"""

import math
from collections.abc import Collection, Sequence

from specfleet.contract import ArmPlan, CellIdentity, SweepConfig
from specfleet.planning.estimate import DEFAULT_MAX_NUM_SEQS, Timing, engine_request_ms
from specfleet.verdicts.nights import SliceKey, identity_key
from specfleet.verdicts.traffic_mix import effective_mix


def predicted_speedup(timing: Timing, config: SweepConfig, arm: ArmPlan, baseline: ArmPlan,
                      cell: CellIdentity) -> float:
    """The arm's request rate over the baseline's at the cell's batch (closed loop) or at batch 1."""
    limit = float(config.engine.max_num_seqs or DEFAULT_MAX_NUM_SEQS)
    batch = min(cell.load_value, limit) if cell.load_mode == "concurrency" else 1.0
    overhead = timing.request_overhead_ms()
    spec = overhead + engine_request_ms(timing, arm, config, cell.prompt_class, cell.sampling, batch)
    base = overhead + engine_request_ms(timing, baseline, config, cell.prompt_class, cell.sampling, batch)
    return base / spec


def cell_order(timing: Timing, config: SweepConfig, cells: Sequence[tuple[ArmPlan, CellIdentity]],
               noise_floor: float | None, decided: Collection[SliceKey] = ()) -> list[CellIdentity]:
    """``cells`` (with their arms) in the order a budgeted sweep measures them; ``decided``: the
    cells whose claims an earlier look decided (``analysis.nights``), measured last."""
    mix = effective_mix(config)
    baseline = next(arm for arm, _ in cells if arm.is_baseline) if any(a.is_baseline for a, _ in cells) else None

    def key(item: tuple[ArmPlan, CellIdentity]) -> tuple[int, bool, int, float, float, float, int]:
        arm, cell = item
        share = mix.class_shares.get(cell.prompt_class, 0.0) * (
            mix.load_shares.get(cell.load_value, 0.0) if cell.load_mode == mix.load_mode else 0.0)
        distance = 0.0
        if not arm.is_baseline and baseline is not None and noise_floor:
            speedup = predicted_speedup(timing, config, arm, baseline, cell)
            distance = abs(math.log(speedup)) / math.log1p(noise_floor)
        settled = identity_key(cell) in decided
        return (0 if arm.is_baseline else 1, settled, cell.repeat, 0.0 if share > 0 else 1.0, distance, -share,
                arm.k or 0)

    return [cell for _, cell in sorted(cells, key=key)]
