"""Timeline family: Nsight Systems exports and PyTorch traces, read into one table schema (tables.py,
api_kinds.py), measured one timeline (rank) at a time (measure.py, over steps.py, gaps.py, kernels.py,
sync.py, setup.py, ops.py, kv_cache.py), and turned into run-level and per-rank facts across ranks
(analysis.py, ranks.py, rank_scale.py) in the vocabulary of catalogue.py.

Importing the package loads nothing: the readers import tables.py alone."""
