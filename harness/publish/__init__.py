"""The report stage (pandas environment): the published folder, its README, page, case pages and reproducers."""
