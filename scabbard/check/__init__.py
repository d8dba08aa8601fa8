"""Checks of the fault-tolerance core beyond a killed process: the crash-state explorer."""

from scabbard.check.crashstates import Explorer, Report, Settings
from scabbard.check.model import CrashState, FileSystemModel

__all__ = ["CrashState", "Explorer", "FileSystemModel", "Report", "Settings"]
