"""Running fp8bench against other checkouts of code: the A/B rounds of ``fp8bench ab`` (a worker process per side,
each importing its own checkout, taking turns) and the probes of ``fp8bench bisect`` (a worktree per commit, built
and measured against the good one). This room starts processes and git worktrees; the statistics that judge the
rounds and the search that picks the next commit stay in :mod:`fp8bench.analysis`, which starts nothing.
"""
