"""The canonical store: Parquet tables and Zarr v3 masks per part (``store``), how a part is
read back (``partition``), checked against its manifest and its GT (``verify``,
``consistency``), locked while written (``lock``), the package's JSON schemas (``schemas``)
and a GT store's training statistics (``training_stats``). Formats write into it
(``sgdask.formats``); evaluations read from it. Nothing here computes a metric.
"""
