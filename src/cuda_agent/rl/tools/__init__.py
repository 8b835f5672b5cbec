"""Run on their own, by hand or from benchmarks/ (`python -m cuda_agent.rl.tools.NAME`): the tiny
test model (`tiny_model`; the driver also builds it for `model: tiny`, and the tests use it),
SmolLM2-135M-Instruct from its GGUF as the fill family's starting policy (`pretrained`), and how well
a model fills the kernel, judged through the reward route (`fill_eval`).

Built on rl/workers/ and rl/data/; the driver imports `tiny_model` alone.
"""
