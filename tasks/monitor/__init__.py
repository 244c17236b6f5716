"""A production server as Prometheus sees it: the HTTP API client and what is read through it."""
