"""Building a solution: the toolchain (nvcc or the host compiler, and the flags a solution may
add), what a build compiles (sources.py), the ninja build into a content-addressed object cache
(extension.py), precompiled headers (pch.py) and compiler messages cut to what a person reads first
(errors.py)."""
