"""Prefect flows: each reads as the story of one job; the work is in ``tasks`` and the core."""
