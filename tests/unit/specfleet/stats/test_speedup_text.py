"""The one spelling of a speedup (specfleet.stats.bootstrap.speedup_text) and its report wrapper."""

from specfleet.stats.bootstrap import speedup_text
from specfleet_tasks.report import fmt


def test_speedup_text_estimate_then_bracket() -> None:
    assert speedup_text(1.234, 1.1, 1.351) == "1.23x [1.10, 1.35]"
    assert speedup_text(0.85, 0.8, 0.9, digits=3) == "0.850x [0.800, 0.900]"


def test_speedup_text_leaves_out_a_half_formed_bracket() -> None:
    assert speedup_text(1.5) == "1.50x"
    assert speedup_text(1.5, 1.2, None) == "1.50x"
    assert speedup_text(1.5, None, 1.8, digits=3) == "1.500x"


def test_report_speedup_range_is_the_core_spelling() -> None:
    assert fmt.speedup_range(1.234, 1.1, 1.351) == speedup_text(1.234, 1.1, 1.351)
    assert fmt.speedup_range(None, 1.0, 2.0) == fmt.NA
