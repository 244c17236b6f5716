"""Where results are kept: the sweep's results folder, per-request Parquet, the S3 mirror."""
