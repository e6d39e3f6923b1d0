"""kgen's end-to-end transformer benchmark: `python3 -m bench.transformer --help` (see run.py)."""
