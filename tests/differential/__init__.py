"""sgdask against independent references: the literal twins, sgbench, SGBench 2.0.0 and
panopticapi."""
