"""Where every verdict is made: the one decision rule, cell by cell, per prompt class, at the traffic mix, the k
policy, and the sweep's analysis that runs them all at once."""
