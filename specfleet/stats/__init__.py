"""Statistics: bootstrap intervals, the noise floor, equivalence tests and the quality gate."""
