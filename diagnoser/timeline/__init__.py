"""The normalized timeline model shared by the Nsight Systems and PyTorch profiler readers."""
