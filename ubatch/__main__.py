import sys

from ubatch.cli import main

sys.exit(main())
