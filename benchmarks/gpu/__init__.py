"""The GPU run (issue 23, item 7): `run.sh` and what it measures; `--cpu` tests the same code without a GPU."""
