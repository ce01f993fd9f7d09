"""Worker processes that survive what a task does to them, and a long stage's progress."""
