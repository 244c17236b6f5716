"""docs/configuration.md is generated from the contract's field descriptions: every key has one, and the page
is what the generator writes from them now."""

import pytest

from infra.config_docs import PAGE, main, page, type_text, undescribed
from specfleet.contract.workload import LoadSpec


def test_every_key_of_the_config_is_described() -> None:
    assert undescribed() == []


def test_the_page_is_generated_from_the_descriptions() -> None:
    assert PAGE.read_text(encoding="utf-8") == page(), "run python infra/config_docs.py"
    assert main(["--check"]) == 0


def test_the_page_has_a_row_per_key_with_its_description() -> None:
    text = page()
    for name, field in LoadSpec.model_fields.items():
        assert f"| `{name}` |" in text and (field.description or "?") in text


def test_the_check_fails_on_a_stale_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("infra.config_docs.page", lambda: page() + "\nchanged\n")
    assert main(["--check"]) == 1


def test_types_read_as_words() -> None:
    field = LoadSpec.model_fields["concurrency"]
    assert type_text(field.annotation, field.metadata) == "list of integer (> 0)"
    assert type_text(LoadSpec.model_fields["adaptive_stopping"].annotation) == "block, optional"
