"""Data files shipped with the package: Spark's log configuration, the simulator's
calibration (``calibration.json``, measured by ``scabbard sim calibrate``) and the
experiments' parameter files (``experiments/<notebook>.yaml``, read by ``scabbard
reproduce``).  Find them with :func:`scabbard.paths.resource`."""
