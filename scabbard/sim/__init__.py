"""POG simulator: a discrete-event model calibrated on the real engine. DESIGN.md §12."""
