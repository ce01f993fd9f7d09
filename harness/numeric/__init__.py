"""Judging values, numpy only: a runtime's outputs against torch's, and where along the graph they part ways."""
