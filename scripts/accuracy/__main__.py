import sys

from scripts.accuracy.cli import main

sys.exit(main())
