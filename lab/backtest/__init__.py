"""Offline backtests: run the detectors over a recording, score them against labels, report.

`runner` drives the pipeline over a recording, `scoring` matches incidents to
labels, `report` and `timeline` write the results, and `evaluate` runs a
whole scenario set (simulate, backtest, pool the figures).
"""
