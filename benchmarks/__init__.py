"""On-demand benchmarks: `python -m benchmarks` runs every `bench_*.py` here.

They print figures and assert nothing; tests never run them.
"""
