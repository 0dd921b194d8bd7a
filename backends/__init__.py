"""Backends, one package per target (installed as ``gluon_trace.backends``)."""
