"""The evaluator: whole replays of the judge over a trace set (split, fit, cross-fitting) and its reports."""
