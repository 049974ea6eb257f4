"""Process exit codes, one set for the whole tool (the public contract; documented in every verb's ``--help``).

Verbs without a verdict: 0 success, 1 a case failed or came out invalid (``run``) or training diverged
(``converge``), 2 bad input, 74 the disk filled (``run``, ``converge``), 130 interrupted (Ctrl-C, SIGTERM or
SIGHUP). Verbs with a verdict (``gate``, ``ab``): 0 pass, 1 regression,
2 inconclusive, noisy or incomparable, 3 harness error or bad input: there 2 is a verdict, so bad input takes 3.
"""

EXIT_OK, EXIT_CASE_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_PASS, EXIT_REGRESSION, EXIT_INCONCLUSIVE, EXIT_HARNESS_ERROR = 0, 1, 2, 3
# A run stopped because the run file's disk filled (sysexits.h EX_IOERR: an error while doing I/O on a file).
EXIT_DISK_FULL = 74
