"""`python -m bench`: the benchmark suite (see bench/suite.py)."""

import signal

from .suite import main

# SIGTERM unwinds like Ctrl-C, so the broker, nginx and workers this run started are stopped.
signal.signal(signal.SIGTERM, signal.default_int_handler)
main()
