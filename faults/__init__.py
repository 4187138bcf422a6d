"""Fault loops run from the outside with real processes: control planes killed -9 and restarted under traffic, the
registrar killed -9 under concurrent writes, random bad inputs on every interface.

`python -m faults` (`nox -s faults`) runs the long loops and prints their figures; `tests/integration/test_faults.py`
runs the same loops small. Each loop is one function taking its size, so both run the same code.
"""
