"""Finds grpcio and protobuf when they come from Debian's packages.

Debian installs ``python3-grpcio`` and ``python3-protobuf`` into
``/usr/lib/python3/dist-packages``, which only Debian's own interpreter
(``/usr/bin/python3``) searches. Another CPython of the same version (pyenv's, say)
can load those modules too: when ``grpc`` cannot be imported, this adds that directory
to the end of ``sys.path``, but only if its compiled grpc module fits the running
interpreter (same extension suffix). Set ``TOOLMESH_NO_DIST_PACKAGES=1`` to turn this
off.
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import os
import sys

DIST_PACKAGES = "/usr/lib/python3/dist-packages"


def ensure_grpc() -> None:
    """Makes ``grpc`` and ``google.protobuf`` importable, or leaves sys.path alone."""
    if importlib.util.find_spec("grpc") is not None:
        return
    if os.environ.get("TOOLMESH_NO_DIST_PACKAGES") or DIST_PACKAGES in sys.path:
        return
    cython = os.path.join(DIST_PACKAGES, "grpc", "_cython")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if glob.glob(os.path.join(cython, "cygrpc" + suffix)):
            sys.path.append(DIST_PACKAGES)
            return
