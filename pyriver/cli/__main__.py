import sys

from pyriver.cli import main

sys.exit(main())
