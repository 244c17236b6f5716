"""Equivalence gates and analysis settings (seed: "An equivalence test that survives numerics")."""

from typing import Literal

from pydantic import Field, PositiveInt

from specfleet.contract.base import ContractModel


class StochasticTestSpec(ContractModel):
    """A pre-specified two-sample test: sample size follows from these, not from the data."""

    temperature: float = Field(1.0, gt=0, description="Temperature of the sampled tokens compared.")
    tokens_per_sample: PositiveInt = Field(8, description="Tokens generated per sample.")
    min_detectable_tv: float = Field(
        0.1, gt=0, lt=1, description="Smallest total-variation discrepancy the test must detect."
    )
    significance: float = Field(0.05, gt=0, lt=0.5, description="The test's false-rejection rate.")
    power: float = Field(0.8, gt=0.5, lt=1, description="Chance of detecting a difference of min_detectable_tv.")
    max_samples_per_prompt: PositiveInt = Field(400, description="Cap on the samples the power asks for.")


class EquivalenceSpec(ContractModel):
    prompt_class: str | None = Field(None, description="Prompt class to probe; default the first.")
    prompts: PositiveInt = Field(8, description="Prompts the greedy and stochastic probes use.")
    greedy_max_tokens: PositiveInt = Field(48, description="Tokens each greedy probe generates.")
    stochastic: StochasticTestSpec | None = Field(None, description="The stochastic equivalence test; unset: off.")
    quality_tolerance: float | None = Field(
        None, gt=0, description="Allowed drop in a held-out task score, if a quality gate is run."
    )


class NightsSpec(ContractModel):
    """Deciding over nights (``specfleet.verdicts.sequential``): consecutive sweeps of a config as the looks of
    one sequence."""

    looks: int = Field(ge=2, le=10, description="Looks (finished sweeps) one sequence has at most; after the last, "
                       "a new sequence starts. At most 10: O'Brien-Fleming spending leaves the first of more looks a "
                       "share of the error rate below what a float confidence can state.")
    spending: Literal["bonferroni", "obrien_fleming"] = Field(
        "obrien_fleming", description="How the error rate is spent over the looks: obrien_fleming (almost nothing "
        "on the first looks, most on the last) or bonferroni (equal shares).")


class AnalysisSpec(ContractModel):
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Confidence of every interval and decision.")
    bootstrap_resamples: PositiveInt = Field(2000, description="Resamples of the request-level bootstraps.")
    seed: int = Field(0, description="Seed of the bootstraps and of the performance model.")
    error_control: Literal["family_wise", "false_discovery_rate"] = Field(
        "family_wise", description="How every adopt is corrected for the sweep's many comparisons (cells, "
        "classes, arms at the mix, k policies): family_wise (max-T, simultaneous intervals) or "
        "false_discovery_rate (Benjamini-Hochberg, false-coverage-rate intervals).")
    noise_history: int = Field(
        0, ge=0, description="Earlier finished sweeps of the same config and fingerprint (models, engine, hardware) "
        "whose repeated cells are pooled into the run-to-run noise estimate, newest first: a nightly learns its "
        "noise over the nights instead of from one night's baseline pairs. 0: this sweep's own only.")
    baseline_server_lives: PositiveInt | None = Field(
        None, description="Server lives the opening baseline is split over at least (one after another where fewer "
        "arms run at once): each life re-measures the previous one's first cell, so more lives give the "
        "server-to-server noise its degrees of freedom (`specfleet plan --detect` proposes a number). None: as many "
        "as arms run at once.")
    arm_server_lives: PositiveInt = Field(
        1, description="Server lives each speculative arm's cells are split over, one after another; with two or "
        "more, each life opens with another life's first cell measured again. A server life runs faster or "
        "slower as a whole, and with one life per arm that offset enters every comparison of the arm at full size; "
        "over several lives it averages out of the arm's verdicts at the mix and per class, which is what lets a "
        "first night (no noise history) decide them (`specfleet plan --detect` proposes a number). 1: one server "
        "per arm.")
    min_coverage: float = Field(
        1.0, gt=0, le=1, description="Share of the traffic mix a verdict's measured cells must carry to be "
        "adoptable; below it the verdict is PARTIAL and never adopted.")
    nights: NightsSpec | None = Field(
        None, description="Decide over nights: each sweep whose newest predecessor of the same config and fingerprint "
        "finished is the next look of a sequence of at most `looks`; its analysis pools the runs of the sequence's "
        "earlier sweeps with its own and decides at that look's share of the error rate, a claim decided at an "
        "earlier look keeps its verdict, and a budgeted sweep measures the cells of undecided claims first. None: "
        "every sweep decides alone at `confidence`.")
    concurrency_buckets: list[PositiveInt] = Field(
        default_factory=list, description="Bucket edges for the k policy; default the measured levels."
    )
