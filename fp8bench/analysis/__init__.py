"""Reading stored measurements: the run report, payoff, change points along commits, statistics, and the gate.
"""
