"""Run the benchmark suite and print one table of results, each measured side by side with its
baseline in the same run (absolute times alone mean little on a shared machine).

    .venv/bin/python benchmarks/run.py            # everything, full size (about 5 minutes)
    .venv/bin/python benchmarks/run.py --quick    # smoke sizes (CI runs this)
    .venv/bin/python benchmarks/run.py --only P1,P3

Needs what `scripts/test` installs: the venv and the pinned CLIs in .tools/. Exit status 0
when every goal held, 1 when one did not, 2 when a benchmark could not run.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
import traceback

from _harness import ROOT, Result, print_table

#: (id, module): run in this order.
SUITE = [
    ("P1", "p1_startup"),
    ("P2", "p2_second_turn"),
    ("P2", "codex_overhead"),
    ("P3", "p3_throughput"),
    ("P4", "p4_cancel"),
    ("P5", "p5_threads"),
    ("P6", "p6_tool_calls"),
    ("P7", "p7_listen"),
    ("P8", "p8_shutdown"),
    ("P9", "p9_first_turn"),
    ("P10", "p10_memory"),
    ("P11", "p11_fleet"),
]


def _machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{time.strftime('%Y-%m-%d %H:%M')} · {os.cpu_count()} CPUs · load {load} · "
        f"Python {platform.python_version()} · {platform.system()} {platform.release()}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smoke sizes: seconds, not minutes")
    parser.add_argument("--only", help="comma-separated ids, e.g. P1,P3")
    args = parser.parse_args()
    only = {x.strip().upper() for x in args.only.split(",")} if args.only else None
    os.chdir(ROOT)
    print(_machine(), flush=True)
    results: list[Result] = []
    broken = False
    for bench_id, module_name in SUITE:
        if only is not None and bench_id not in only:
            continue
        started = time.monotonic()
        print(f"running {module_name} ...", file=sys.stderr, flush=True)
        try:
            module = importlib.import_module(module_name)
            results += module.run(quick=args.quick)
        except Exception:
            broken = True
            traceback.print_exc()
            results.append(Result(bench_id, module_name, "error", "-", None, "runs", False))
        print(f"  {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    print()
    print_table(results)
    if broken:
        return 2
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
