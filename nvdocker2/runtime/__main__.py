"""`python -m nvdocker2.runtime ARGS…` runs the runtime shim."""

import sys

from nvdocker2.runtime import main

sys.exit(main())
