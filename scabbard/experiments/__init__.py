"""One module per paper figure: typed settings -> a run returning a tidy table -> a plot.

Notebooks in ``notebooks/`` call these and stay thin; ``reproduce`` runs the
notebooks with papermill from the parameter files in ``experiments/``.
"""
