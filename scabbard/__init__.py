"""Scabbard workbench: fault-tolerant single-node stream processing (SCABBARD, PVLDB 2022).

Layered as in docs/design.md: ``schema``/``batch`` at the bottom, then ``kernels``,
``compression`` and ``storage``, then the ``engine`` and the persistent operator
graph (``pog``), with ``workloads`` (Spark generators and the paper's queries),
``experiments`` (one module per paper figure) and the ``cli`` on top.
"""

__version__ = "0.1.0"
