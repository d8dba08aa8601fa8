"""Persistent operator graph: PStream, FTOperator, PUnit, markers, Alg. 1, GC, recovery. DESIGN.md §6."""
