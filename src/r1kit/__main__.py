import sys

from r1kit.cli import main

sys.exit(main())
