"""Running a solution: the sandboxed child where its code runs (child.py), the reference worker
where it never does (reference.py), the runtime checks inside the child (runtime.py), the timed
calls both serve (calls.py), how outputs reach the reference (transfer.py) and spare processes
started ahead (spares.py). Both processes are `cuda_agent.sandbox` processes."""
