"""Runs: which inputs are one run (grouping.py) and their analyses merged into one result (merge.py;
catalogue.py: the facts only a run with several sources has)."""
