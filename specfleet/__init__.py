"""specfleet core: the benchmark contract, metrics, statistics and economics.

Everything in this package is pure: no network, no subprocesses, no files.
The I/O lives in the top-level ``tasks`` and ``flows`` packages.
"""

__version__ = "0.1.0"
