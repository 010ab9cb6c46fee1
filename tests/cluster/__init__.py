"""Tests of sgdask's clusters: by hand, from a cluster file, Dask-Gateway, SLURM."""
