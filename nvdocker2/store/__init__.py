"""nvdocker2's own state and how files are written: `atomic` (the one atomic-write helper),
`lock` (the state directory, its trust check and its lock), `backups` and `journal`."""
