"""The gates a speculative arm must pass before any saving counts: greedy and stochastic equivalence, the held-
out quality gate with its scored sets and scorers, the engine's self-check findings."""
