"""Running a solution: the sandboxed child where its code runs (child.py), the reference worker
where it never does (reference.py), the runtime checks inside the child (runtime.py), how outputs
reach the reference (transfer.py), spare processes started ahead (spares.py), the JSON-lines
process (process.py), and isolation for them and for the agent's shell commands (sandbox.py,
commands.py)."""
