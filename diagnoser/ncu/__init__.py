"""The Nsight Compute family (its Family: diagnoser.families.ncu, named "kernel"): model.py, what both
ncu readers fill; per-launch Speed-of-Light facts (catalogue.py: the facts; units.py: metric reading,
pipes, access waste; analysis.py: per-launch facts and the SOL scatter; shared_memory.py,
sm_balance.py, aten_ops.py). Whose code a kernel is, by name, is diagnoser/kernel_names.py: the
timeline reads it too."""
