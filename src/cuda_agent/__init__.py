"""cuda-agent: LLM agents that write fast, verified CUDA kernels for PyTorch models."""

__version__ = "0.1.0"
