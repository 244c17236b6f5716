"""The sweep's report: what the aggregate step decided, once, as every output shows it."""
