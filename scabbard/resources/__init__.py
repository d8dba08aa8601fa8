"""Data files shipped with the package (Spark's log configuration)."""
