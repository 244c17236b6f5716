"""The one cell plan against a running endpoint (specfleet_tasks.arm.cell.endpoint_cell_plan): what measure and each
canary replica measure."""

from specfleet.contract import SamplingSpec, SLOSpec
from specfleet.contract.prompts import PromptItem
from specfleet_tasks.arm.cell import endpoint_cell_plan
from specfleet_tasks.loadgen import ClosedLoop, PoissonArrivals

ITEMS = [PromptItem(id="a", prompt="hello"), PromptItem(id="b", prompt="world")]
SLO = SLOSpec(ttft_ms=500.0, itl_ms=50.0, percentile=95.0)


def test_a_closed_loop_cell_at_the_given_concurrency() -> None:
    plan = endpoint_cell_plan(arm="baseline-replica", prompt_class="code", prompts=ITEMS,
                              sampling=SamplingSpec(name="canary", temperature=0.0), concurrency=4, rate=None,
                              requests=16, warmup=2, max_tokens=64, slo=SLO, key_salt="c1",
                              max_error_fraction=0.1, client_lag_limit_ms=20.0)
    ident = plan.identity
    assert (ident.arm, ident.load_mode, ident.load_value, ident.sampling, ident.label) == (
        "baseline-replica", "concurrency", 4.0, "canary", "baseline-replica / code / c4 / canary / r0")
    assert plan.load == ClosedLoop(4) and plan.key == ident.key("c1")
    assert (plan.requests, plan.warmup_requests) == (16, 2)
    assert (plan.max_error_fraction, plan.client_lag_limit_ms) == (0.1, 20.0)
    assert plan.settings.max_tokens == 64 and plan.settings.ignore_eos


def test_an_open_loop_cell_at_the_given_rate() -> None:
    plan = endpoint_cell_plan(arm="endpoint", prompt_class="chat", prompts=ITEMS,
                              sampling=SamplingSpec(name="cli", temperature=0.7), concurrency=None, rate=2.5,
                              requests=8, warmup=0, max_tokens=32, slo=SLO, key_salt="measure", ignore_eos=False)
    assert (plan.identity.load_mode, plan.identity.load_value) == ("rate", 2.5)
    assert plan.load == PoissonArrivals(2.5, 0) and plan.key == plan.identity.key("measure")
    assert plan.max_error_fraction == 1.0 and not plan.settings.ignore_eos
