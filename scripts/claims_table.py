"""Print the claim-to-probe table of docs/gpu-claims.md from fp8bench.measure.claims.CLAIMS (tests/test_claims.py
keeps the page in step with the table).

    python scripts/claims_table.py
"""

from __future__ import annotations

from fp8bench.measure.claims import CLAIMS


def how(claim) -> str:
    if claim.check:
        return f"`{claim.check}` check"
    if claim.no_probe:
        return f"none: {claim.no_probe}"
    return f"probe `{claim.name}`: " + " ".join((claim.probe.__doc__ or "").split())


if __name__ == "__main__":
    print("| claim | what the code assumes | do not trust until it holds | how it is confirmed |")
    print("|---|---|---|---|")
    for c in CLAIMS:
        print(f"| `{c.name}` | {c.statement} | {c.rests_on_it} | {how(c)} |")
