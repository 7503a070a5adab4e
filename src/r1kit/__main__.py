import sys

from r1kit.cli import main
from r1kit.console import leave_as_worker

sys.exit(leave_as_worker(main()))
