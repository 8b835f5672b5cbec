"""The evaluation harness: build, static checks, sandboxed verification, timing and reward.

`evaluate()` in evaluate.py is the one entry point; everything else serves it.
"""
