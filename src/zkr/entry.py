"""Process entry point of the ``zkr`` console script and of ``python -m zkr``.

One CLI call is one short-lived process handling one bounded request (at most 1 MiB), so the
cyclic garbage collector is switched off before anything is imported: importing zkr creates
thousands of objects and gives the collector nothing to free, and everything a call allocates
is released by reference counting or at exit. That saves about 2 ms of a 40 ms budget
(``benchmarks/bench_core.py``). Library users are unaffected: only this entry point does it.
"""

import gc


def main() -> int:
    """Run the CLI (:func:`zkr.cli.main`) with the cyclic collector off; returns the exit code."""
    gc.disable()
    from zkr.cli import main as cli_main

    return cli_main()
