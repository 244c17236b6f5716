"""The one spelling of a load (specfleet.contract.matrix.load_label), in cell labels too."""

from specfleet.contract.matrix import CellIdentity, load_label


def test_load_label_spells_each_load_mode() -> None:
    assert load_label("concurrency", 4.0) == "c4"
    assert load_label("rate", 2.5) == "r2.5/s"
    assert load_label("rate", 2.0) == "r2/s"


def test_a_rate_cell_label_spells_its_load_the_same_way() -> None:
    ident = CellIdentity(arm="ngram-k3", method="ngram", k=3, load_mode="rate", load_value=2.5, prompt_class="code",
                         sampling="greedy", repeat=0)
    assert ident.label == "ngram-k3 / code / r2.5/s / greedy / r0"
