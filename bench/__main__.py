"""`python -m bench`: the benchmark suite (see bench/suite.py)."""

from .suite import main

main()
