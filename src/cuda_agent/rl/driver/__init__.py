"""The `cuda-agent train` process (cli/train.py imports it): the stages and the run file (`stages`),
each stage's data and overrides (`inputs`), the stages in order and the stage journal (`train`),
launching verl and merging its checkpoints (`launch`; the process group verl runs in:
`verl_process`), metrics and plots (`metrics`), and the stage configs verl composes (`config/`).

verl runs in a child process; the driver never imports verl's trainers and imports without verl.
It reaches the workers' modules only for what it must check before verl starts (the reward's
settings) and the data's for the rows it writes.
"""
