import sys

from pyriver.server import main

sys.exit(main())
