"""``make bench``: sgdask against the sgbench 1.0.0 reference on a PSG-scale synthetic dataset.

Run ``python -m benchmarks.run --help``; see ``benchmarks/README.md``.
"""
