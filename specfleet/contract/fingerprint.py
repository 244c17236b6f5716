"""The sweep fingerprint: what a result depends on. A change in any part calls for revalidation
(seed: "Production gates": revalidate after model, tokenizer, engine or speculator changes)."""

import hashlib
import json

from pydantic import Field

from specfleet.contract.base import RecordModel


class Fingerprint(RecordModel):
    target: str | None = Field(description="sha256 of the target checkpoint; None if not readable here.")
    tokenizer: str | None
    drafts: dict[str, str | None] = Field(default_factory=dict, description="Speculator path -> sha256.")
    engine: str
    engine_version: str | None
    methods: dict[str, object] = Field(default_factory=dict, description="Arm -> speculative_config.")
    hardware: dict[str, object] = Field(default_factory=dict)

    @property
    def digest(self) -> str:
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def changed_parts(old: Fingerprint, new: Fingerprint) -> list[str]:
    """Names of the parts that differ: target, tokenizer, draft, engine, methods, hardware."""
    parts = []
    if old.target != new.target:
        parts.append("target")
    if old.tokenizer != new.tokenizer:
        parts.append("tokenizer")
    if old.drafts != new.drafts:
        parts.append("draft")
    if (old.engine, old.engine_version) != (new.engine, new.engine_version):
        parts.append("engine")
    if old.methods != new.methods:
        parts.append("methods")
    if old.hardware != new.hardware:
        parts.append("hardware")
    return parts
