"""samspec-bench: validation and benchmarking of SAM speculative decoding for RL rollouts."""

__version__ = "0.1.0"
