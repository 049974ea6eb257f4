"""CPU seconds of the dashboard sidebar's filter choices (``filter_options``) on a store, three times.

    python scripts/time_filter_options.py STORE     # a results folder, an SQLite file or a database URL
"""

from __future__ import annotations

import os
import sys
import time

from fp8bench.results.store import open_store
from fp8bench.results.store.queries import filter_options


def main(target: str) -> None:
    store = open_store(target)
    for _ in range(3):
        started = time.process_time()
        rows = len(filter_options(store))
        print(f"filter_options: {time.process_time() - started:.3f} CPU s, {rows} rows, "
              f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(sys.argv[1])
