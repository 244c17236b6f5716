"""Before anything runs: the config read and checked, models resolved and fingerprinted, the matrix
expanded into the arms and cells still to measure."""
