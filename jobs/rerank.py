"""Scheduled re-ranking entry point (cron, Kubernetes CronJob):
``python jobs/rerank.py --registry URL --gt URL --out URL [--scheduler ADDR] [--dry-run]``.

Exit codes: 0 published or already up to date; 2 bad input or unreachable storage;
3 another rerank holds the lock (try later); 1 unexpected failure. A crash leaves the
previously published leaderboard in place (publishing is one atomic pointer write).
"""

import sys

from sgdask.cli import main

if __name__ == "__main__":
    main(["rerank", *sys.argv[1:]])
