"""Kernel family: Nsight Compute launches -> Speed-of-Light facts (catalogue.py: the facts; units.py: metric
reading, pipes and kernel origins; analysis.py: per-launch facts and the SOL scatter)."""
