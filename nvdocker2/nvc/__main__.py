"""`python -m nvdocker2.nvc`: the cli's entry."""

import sys

from nvdocker2.nvc.main import main

sys.exit(main())
