"""Synthetic tasks: a seed catalog of operators, composers that stack them into KernelBench-form
tasks, the filters a task must pass, and the resumable, parallel run that writes the dataset."""
