"""Synthetic datasets for the demo, the tests, the benchmarks and the documentation: PSG-shaped
(``psg``), VG150-shaped (``vg``), Open Images V6-shaped (``oi``) and COCO panoptic (``coco``),
each deterministic from its seed. Shipped in the wheel: ``sgdask synth`` and ``make demo`` use
``psg``."""
