"""Builders and fixtures shared by test modules: test modules import shared helpers only from here
(``tests/unit/test_layout.py`` keeps them from importing one another)."""
