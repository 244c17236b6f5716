"""Settings every tier shares.

Hypothesis fails an example that takes longer than its deadline (200 ms by default): an outcome
that depends on how fast the machine is that day, and one a loaded machine meets (an example of
``test_acceptance.py`` took 411 ms beside another test run). No property test here is about
speed, so none has a deadline."""

from hypothesis import settings

settings.register_profile("specfleet", deadline=None)
settings.load_profile("specfleet")
