"""The fault-tolerance wing (docs/design.md): what makes the engine core survive a crash.

The engine core (:mod:`scabbard.engine`) runs a query and knows nothing of files; this
package plugs into it through its ports and composes the persistent operator graph
(:mod:`scabbard.pog`) and the storage (:mod:`scabbard.storage`):

* :mod:`~scabbard.ft.state` - the query's operator state as an ft-operator: tracked per
  task, cut into state p-units at a checkpoint marker, loaded back;
* :mod:`~scabbard.ft.sinks` - the exactly-once sinks (clocked, transactional);
* :mod:`~scabbard.ft.recovery` - a fault-tolerant run, fresh or recovering;
* :mod:`~scabbard.ft.controller` - the engine as its own process, killed and recovered;
* :mod:`~scabbard.ft.verify` - a run's committed output against a failure-free run's.

It is a package of its own, not part of :mod:`scabbard.pog`: the POG's primitives (p-streams,
p-units, markers, the checkpoint controller) know nothing of the engine, and the wing is
where the two meet - ``ft`` imports ``engine`` and ``pog``, neither imports ``ft``.
"""
