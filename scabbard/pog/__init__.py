"""Persistent operator graph: PStream, PUnit, markers, GC (docs/design.md).

FTOperator, checkpoint markers (Alg. 1) and recovery build on this in the
checkpoint issue.
"""

from scabbard.pog.graph import POG
from scabbard.pog.markers import Marker, MarkerKind
from scabbard.pog.pstream import PStream, PStreamError, StreamCheckpoint
from scabbard.pog.punit import Dependency, Kind, PUnit

__all__ = ["POG", "Dependency", "Kind", "Marker", "MarkerKind", "PStream", "PStreamError",
           "PUnit", "StreamCheckpoint"]
