"""Corpus modules: gotcha cases registered with :func:`harness.cases.corpus.register`."""
