"""Lightweight codecs in numba, column statistics, adaptive selection. DESIGN.md §8."""
