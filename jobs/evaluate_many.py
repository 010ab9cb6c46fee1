"""Batch entry point: ``python jobs/evaluate_many.py MANIFEST [--scheduler ADDR] [--dry-run]``.

The same as ``sgdask evaluate-many``; see ``jobs/examples/many.yaml``.
"""

import sys

from sgdask.cli import main

if __name__ == "__main__":
    main(["evaluate-many", *sys.argv[1:]])
