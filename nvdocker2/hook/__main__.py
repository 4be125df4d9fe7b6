"""`python -m nvdocker2.hook ARGS…` runs the prestart hook."""

import sys

from nvdocker2.hook import main

sys.exit(main())
