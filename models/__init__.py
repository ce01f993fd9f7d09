"""Corpus modules: gotcha cases registered with :func:`harness.corpus.register`."""
