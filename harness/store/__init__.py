"""The build folder's state.

Where each file lives, content-addressed keys, stamps, locks, the plan, the frontier, the nightly's gather.
"""
