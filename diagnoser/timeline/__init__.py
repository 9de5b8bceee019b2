"""Timeline family: Nsight Systems exports and PyTorch traces, read into one table schema (tables.py,
api_kinds.py), measured by one analysis (analysis.py, over steps.py, gaps.py, kernels.py, sync.py,
setup.py, ops.py, kv_cache.py, ranks.py, rank_scale.py) into the facts of catalogue.py.

Importing the package loads nothing: the readers import tables.py alone."""
