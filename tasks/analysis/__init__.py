"""Where a sweep's verdicts are made: stored cells and probes read back into the core's decisions."""
