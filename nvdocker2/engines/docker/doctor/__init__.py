"""Docker's doctor checks: daemon.json (`checks_config`), the running dockerd
(`checks_dockerd`) and CDI mode (`checks_cdi`). They register with nvdocker2.doctor's registry,
which runs them with the host's checks against one Context."""
