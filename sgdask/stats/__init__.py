"""Statistics on per-image terms: the term table, the bootstrap over images, paired
comparisons. Pure numpy + scipy.sparse: no I/O, no Dask."""
