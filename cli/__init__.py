"""The ``specfleet`` command line: a thin typed layer over the core, tasks and flows."""
