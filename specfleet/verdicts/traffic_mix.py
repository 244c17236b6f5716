"""The traffic mix a verdict is weighted by: the config's ``traffic`` block, else the stated
default (seed: "Production gates": the entry gate holds at the production concurrency
distribution, on at least three prompt classes)."""

from collections.abc import Mapping
from typing import TypeVar

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.sweep import SweepConfig
from specfleet.contract.traffic import ShareBasis
from specfleet.errors import InputError

Key = TypeVar("Key", str, float)
CellKey = tuple[str, float]
"""(prompt class, load value) of one cell of the mix."""


class TrafficMix(RecordModel):
    """Shares per prompt class and per load, each summing to one, and where they came from."""

    share_basis: ShareBasis
    class_shares: dict[str, float]
    load_mode: str = Field(description="'concurrency' or 'rate', as CellIdentity.load_mode.")
    load_shares: dict[float, float]
    default: bool = Field(description="True: the config has no traffic block; the shares are the default.")
    note: str = Field(description="One sentence saying where the shares come from.")


def effective_mix(config: SweepConfig) -> TrafficMix:
    """The ``traffic`` block normalised to sum to exactly one, or equal class shares and the
    measured loads weighted equally (concurrency levels when the sweep has any, else rates)."""
    traffic = config.traffic
    if traffic is not None:
        mode = "concurrency" if traffic.concurrency is not None else "rate"
        return TrafficMix(share_basis=traffic.share_basis, class_shares=_normalised(traffic.prompt_classes),
                          load_mode=mode, load_shares=_normalised(traffic.load_shares), default=False,
                          note=f"traffic mix from the config's traffic block (shares of {traffic.share_basis})")
    classes = [p.name for p in config.prompt_classes]
    mode = "concurrency" if config.load.concurrency else "rate"
    loads = [float(c) for c in config.load.concurrency] or list(config.load.rates_per_s)
    return TrafficMix(
        share_basis="tokens", class_shares={c: 1 / len(classes) for c in classes}, load_mode=mode,
        load_shares={v: 1 / len(loads) for v in loads}, default=True,
        note=f"no traffic block: default mix, equal token shares for the {len(classes)} prompt classes and the "
        f"{len(loads)} measured {'concurrency levels' if mode == 'concurrency' else 'arrival rates'} weighted equally",
    )


def _normalised(shares: Mapping[Key, float]) -> dict[Key, float]:
    total = sum(shares.values())
    return {key: share / total for key, share in shares.items()}


def cell_token_shares(
    mix: TrafficMix, output_tokens_per_request: Mapping[str, float] | None = None
) -> dict[CellKey, float]:
    """Share of the fleet's output tokens served at each (class, load): f = w_c x q_l, classes and
    loads independent. Request shares become token shares by the classes' mean output tokens per
    request (w_c proportional to r_c x n_c); a load's request share is its token share then."""
    class_tokens = dict(mix.class_shares)
    if mix.share_basis == "requests":
        per_request = output_tokens_per_request or {}
        missing = [c for c, r in mix.class_shares.items() if r > 0 and c not in per_request]
        if missing:
            raise InputError(f"request shares need the mean output tokens per request of {', '.join(missing)}")
        class_tokens = _normalised({c: r * per_request[c] if r > 0 else 0.0
                                    for c, r in mix.class_shares.items()})
    return {(c, load): w * q for c, w in class_tokens.items() for load, q in mix.load_shares.items()}
