"""``benchmarks.scale``'s worker counts and report: every count's speed-up over 1 worker, its
per-task costs, and a count above the machine's cores marked as oversubscribed."""

from __future__ import annotations

import pytest

from benchmarks.scale import render, summary, worker_counts


def _job(models: int, wall: float, workers: int) -> dict:
    """One driver's row as ``benchmarks.scale._run`` records it (10 tasks per model)."""
    tasks = 10 * models + 1
    return {"models": models, "wall_s": wall, "driver_cpu_s": 0.1 + 0.01 * models,
            "driver_peak_rss": 200 * 2**20, "worker_cpu_s": 1.2 * models,
            "scheduler_cpu_s": 0.05 + 0.002 * tasks, "load_before": 1.0,
            "tasks": {"n": tasks, "end_s": wall,
                      "kinds": {"score_partition": {"n": 2 * models, "compute_s": models},
                                "finalized": {"n": models, "compute_s": 0.2 * models}},
                      "workers": [{"busy_s": 1.2 * models / workers, "first_s": 0.1,
                                   "last_s": wall - 0.2}] * workers}}


def _measured(workers: int, wall_10: float) -> dict:
    return {"workers": workers, "one": [_job(1, 1.5, workers)] * 3,
            "ten": [_job(10, wall_10, workers)] * 3, "fifty": None}


def test_worker_counts_are_sorted_and_include_one():
    assert worker_counts("16,2,4") == [1, 2, 4, 16]
    assert worker_counts("1,2") == [1, 2]
    with pytest.raises(SystemExit, match="at least 1"):
        worker_counts("0,2")
    with pytest.raises(SystemExit, match="not a list"):
        worker_counts("two")


def test_report_gives_each_count_its_speedup_and_marks_oversubscription():
    s = summary({1: _measured(1, 12.0), 2: _measured(2, 6.5), 4: _measured(4, 6.0)}, cores=2)
    assert s["speedup_10"] == pytest.approx(12.0 / 6.5)
    assert s["4"]["speedup_10"] == pytest.approx(2.0)
    assert [s[w]["oversubscribed"] for w in ("1", "2", "4")] == [False, False, True]
    t = s["2"]["per_task_10"]
    assert t["tasks"] == 101
    # (0.2 - 0.11) CPU-s over the 90 tasks the 10-model job (101) adds to the 1-model job (11)
    assert t["driver_cpu_per_task_marginal_ms"] == pytest.approx(1.0)
    assert t["scheduler_cpu_per_task_marginal_ms"] == pytest.approx(2.0)
    assert t["idle_last_s"] == pytest.approx(0.2)
    text = render({"images": 2177, "protocol": "singlempo", "started": "T", "cores": 2,
                   "summary": s})
    rows = [line for line in text.splitlines() if line.startswith("| 4")]
    assert rows[0].startswith("| 4 (oversubscribed: 2 cores) | 1.5 s | 6.0 s | 2.00x |")
    assert "4 worker processes ran on 2 usable cores" in text
    assert "2 worker processes vs 1: 1.85x (target >= 1.8x" in text
    assert "driver CPU per model (marginal), 2 worker processes: 0.010 s (target <= 0.05" in text
