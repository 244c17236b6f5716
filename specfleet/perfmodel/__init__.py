"""A calibrated performance model: predict the cells a sweep did not measure (issue 17).

Pure, no I/O. Everything it predicts is labelled as predicted and never enters a decision.

- ``acceptance``: per-position acceptance per arm, prompt class and sampling, pooled from the
  cells' spec-decode counters; tokens per engine step at any k.
- ``step_time``: one engine step's time as a linear law of the batch, fitted to the
  per-request chunk gaps of a stored sweep.
- ``batching``: a seeded simulation of continuous batching that emits synthetic request
  records, so the metrics code computes the predicted figures exactly as it computes measured ones.
- ``calibrate``: the ``Calibration`` of a stored sweep (nothing new is measured).
- ``prediction``: ``Prediction``, the model's output (a labelled type the report carries; no model in it).
- ``predict``: ``predict(calibration, query) -> Prediction``; a ``Predictor`` predicts many cells of one
  calibration, simulating the baseline once per class and load.
- ``accuracy``: the figures that score any predictor of cells against measured ones (MAPE, speedup
  sign, crossover concurrency, best k), for ``benchmarks/model_accuracy.py``.
"""
