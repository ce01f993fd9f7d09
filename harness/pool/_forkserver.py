"""Imported first by the fork server of :func:`harness.pool.workers.run_tasks`: the fork server then dies
with the process that started it, even by SIGKILL (the export's server holds torch and lives as long as
the export; without this it outlived a killed export by a minute, until it next looked at its pipe),
and every worker forked from it dies with it (:func:`harness.pool.workers.die_with_parent`)."""

from harness.pool.workers import die_with_parent

die_with_parent()
