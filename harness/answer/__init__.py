"""Answers from a published table alone: reading it back, recommend, diff."""
