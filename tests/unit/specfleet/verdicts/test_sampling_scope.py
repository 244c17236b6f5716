"""A gate decides the verdicts of the decoding mode it validates (``specfleet.verdicts.sampling_scope``):
a failed stochastic distribution test under traffic that declares greedy requests only leaves the
greedy verdicts to the other tests and shows the failure on the arm's line; with any sampled share,
or without the declaration, it rejects every verdict of the arm."""

from specfleet.contract import CellIdentity, StochasticTestSpec, SweepConfig
from specfleet.gates.equivalence import EquivalenceProbe
from specfleet.verdicts.analysis import SweepAnalysis
from specfleet.verdicts.sampling_scope import SAMPLED_WARNING
from tests.support.synthetic_sweep import bracketed, config, history

RATE = {"code": 100.0, "extraction": 140.0, "chat": 80.0}
BOTH_MODES = "[{name: greedy, temperature: 0.0}, {name: t1, temperature: 1.0}]"
GREEDY = {"p0": [1, 2, 3], "p1": [4, 5, 6]}


def rate(ident: CellIdentity) -> float:
    return RATE[ident.prompt_class]


def traffic(sampling: str | None) -> str:
    declared = f"\n  sampling: {sampling}" if sampling else ""
    return ("\ntraffic:\n  share_basis: requests\n  prompt_classes: {code: 0.4, extraction: 0.3, chat: 0.3}\n"
            f"  concurrency: {{4: 1.0}}{declared}\n")


def sweep_config(sampling: str | None, modes: str = BOTH_MODES) -> SweepConfig:
    cfg = config(loads=(4,), sampling=modes, extra=traffic(sampling))
    stochastic = StochasticTestSpec(temperature=1.0, min_detectable_tv=0.3)
    return cfg.model_copy(update={"equivalence": cfg.equivalence.model_copy(update={"stochastic": stochastic}),
                                  "hardware": cfg.hardware.model_copy(update={"peak_demand_tokens_per_s": 2000})})


def analyse(cfg: SweepConfig) -> SweepAnalysis:
    """draft-k2 twice the baseline's rate everywhere, its greedy text the baseline's, its sampled
    tokens never the baseline's: the stochastic test fails, every other test passes."""
    sweep = bracketed(cfg, rate, lambda i: rate(i) * 1.01,
                      {"draft-k2": lambda i: rate(i) * 2.0, "draft-k4": lambda i: rate(i) * 2.0})
    same = {"p0": [[0, 1]] * 40, "p1": [[1, 0]] * 40}
    differs = {"p0": [[2, 2]] * 40, "p1": [[2, 2]] * 40}
    probes = {arm: EquivalenceProbe(arm=arm, greedy=GREEDY, greedy_repeat=GREEDY if arm == "baseline" else None,
                                    stochastic=differs if arm == "draft-k2" else same)
              for arm in ("baseline", "draft-k2", "draft-k4")}
    return sweep.analyse(probes, history(cfg, rate, lambda i: rate(i) * 1.01))


def greedy_verdicts(analysis: SweepAnalysis, arm: str = "draft-k2") -> list[str]:
    return [d.reason_code for d in analysis.decisions if (d.slice.arm, d.slice.sampling) == (arm, "greedy")]


def test_greedy_only_traffic_adopts_greedy_verdicts_and_shows_the_failure_on_the_arms_line() -> None:
    analysis = analyse(sweep_config("{greedy: 1.0}"))
    assert any(g.gate == "stochastic_distribution" and not g.passed for g in analysis.gates["draft-k2"])
    assert greedy_verdicts(analysis) == ["adopt"] * 3
    greedy = [d for d in analysis.decisions if (d.slice.arm, d.slice.sampling) == ("draft-k2", "greedy")]
    assert all(d.serving_warning is not None and d.serving_warning.startswith(
        f"{SAMPLED_WARNING}: stochastic_distribution FAILED: distributions differ") for d in greedy)
    sampled = [d for d in analysis.decisions if (d.slice.arm, d.slice.sampling) == ("draft-k2", "t1")]
    assert sampled and {d.reason_code for d in sampled} == {"gate_failed"}  # a sampled verdict is still rejected
    mix = next(v for v in analysis.mix if (v.name, v.sampling) == ("draft-k2", "greedy"))
    assert mix.other_gates.passed and mix.serving_warning is not None
    assert mix.headline.endswith(mix.serving_warning)
    untouched = next(v for v in analysis.mix if (v.name, v.sampling) == ("draft-k4", "greedy"))
    assert untouched.serving_warning is None and SAMPLED_WARNING not in untouched.headline


def test_traffic_with_a_sampled_share_rejects_the_greedy_verdicts() -> None:
    analysis = analyse(sweep_config("{greedy: 0.9, t1: 0.1}"))
    assert set(greedy_verdicts(analysis)) == {"gate_failed"}
    assert all(d.serving_warning is None for d in analysis.decisions)
    mix = next(v for v in analysis.mix if (v.name, v.sampling) == ("draft-k2", "greedy"))
    assert not mix.other_gates.passed and "gate_failed" in mix.other_gates.detail
    assert greedy_verdicts(analysis, "draft-k4") == ["adopt"] * 3  # its own stochastic test passed


def test_without_the_declaration_a_failed_gate_rejects_every_verdict_of_the_arm() -> None:
    analysis = analyse(sweep_config(None, modes="[{name: greedy, temperature: 0.0}]"))
    assert set(greedy_verdicts(analysis)) == {"gate_failed"}
    assert all(d.serving_warning is None for d in analysis.decisions)
