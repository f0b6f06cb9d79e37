"""The Parallelism Playbook cost model.

Pure functions over small frozen dataclasses, standard library only, so the same
code runs in CPython (build, tests, notebooks) and in the browser under Pyodide.

Units are in the names: ``*_bytes`` are bytes, ``*_s`` seconds, ``*_bytes_per_s``
bytes per second in ONE direction unless the name says ``bidir``. ``GB`` means
1e9 bytes (as the ZeRO paper uses it); ``GiB`` means 2**30 bytes.
"""
