"""MLflow: the sweep's parent run, one child run per cell, the summary tables, and the names they use."""
