"""Print the phase-purity table: for every backend x precision x workload, what the timed ``gemm`` phase dispatches,
and every host synchronization or host-to-device copy in any timed region (``fp8bench.verify.phase_audit``).

Each case is built on small CPU tensors as on a simulated H100 (a B200 for recipes only it runs; the CPU for
backends that run only there), its scaled GEMMs replayed on fake CUDA tensors, and each timed region called once
under a dispatch-level recorder. Cases no device runs are counted, not listed.

Usage::

    .venv/bin/python scripts/phase_purity.py                    # every workload, backend and precision
    .venv/bin/python scripts/phase_purity.py --workload gemm --precision nvfp4 mxfp4
    .venv/bin/python scripts/phase_purity.py --json              # one JSON object per case

Exit status: 0 when every ``gemm`` phase holds only GEMMs, views and allocations and no timed region synchronizes
or copies host memory to the device; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys

from fp8bench.verify.phase_audit import AUDIT_WORKLOADS, CaseAudit, audit_matrix


def row(case: CaseAudit) -> str:
    gemm = case.gemm_phase
    if gemm is None:
        ops, extra = "(no gemm phase)", ""
    else:
        ops = gemm.describe_ops()
        bad = gemm.non_gemm_ops()
        extra = f"  NOT GEMM: {', '.join(bad)}" if bad else ""
    lines = [f"{case.workload:<30} {case.backend:<9} {case.precision:<15} {case.device:<22} {ops}{extra}"]
    for region, v in case.violations():
        lines.append(f"{'':>30}   {region}: {v.describe()}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", nargs="*", choices=AUDIT_WORKLOADS, help="workloads (default: all four)")
    parser.add_argument("--backend", nargs="*", help="backends (default: every registered one)")
    parser.add_argument("--precision", nargs="*", help="precisions (default: every registered one)")
    parser.add_argument("--json", action="store_true", help="one JSON object per audited case")
    args = parser.parse_args(argv)
    cases = audit_matrix(tuple(args.workload or AUDIT_WORKLOADS), tuple(args.backend or ()) or None,
                         tuple(args.precision or ()) or None)
    audited = [c for c in cases if c.status == "audited"]
    impure = [c for c in audited if c.gemm_phase is not None and c.gemm_phase.non_gemm_ops()]
    uncapturable = [c for c in audited if c.violations()]
    if args.json:
        for c in cases:
            print(json.dumps({"workload": c.workload, "backend": c.backend, "precision": c.precision,
                              "device": c.device, "status": c.status,
                              "gemm_ops": dict(c.gemm_phase.ops) if c.gemm_phase else None,
                              "violations": [[r, v.describe()] for r, v in c.violations()]}))
    else:
        print(f"{'workload':<30} {'backend':<9} {'precision':<15} {'built as':<22} ops in the timed gemm phase")
        for c in audited:
            print(row(c))
        print(f"\n{len(audited)} cases audited, {len(cases) - len(audited)} not run on any device; "
              f"{len(impure)} gemm phases hold non-GEMM work; {len(uncapturable)} cases synchronize or copy host "
              "memory in a timed region")
    return 1 if impure or uncapturable else 0


if __name__ == "__main__":
    sys.exit(main())
