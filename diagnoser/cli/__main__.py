"""`python -m diagnoser.cli`: the same as `diagnose`."""
from . import main

main()
