import sys

from edgebuild.runtime.cli import main

sys.exit(main())
