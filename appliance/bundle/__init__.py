"""The air-gap bundle: everything an install needs, built where the registries are reachable.

`make bundle BUNDLE=DIR` (build.py, run in the project's venv) writes a wheelhouse, sources, Debian
packages and a manifest; `make install-offline BUNDLE=DIR` checks the manifest (manifest.py, standard
library only, run by the system Python before any venv exists) and installs with pip's `--no-index
--find-links`. plan.py decides what belongs in it: every distribution installed in the venv, grouped
by the extra that brings it.
"""
