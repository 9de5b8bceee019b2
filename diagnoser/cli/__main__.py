"""`python -m diagnoser.cli`: the same as `diagnose`."""
from . import run

if __name__ == "__main__":  # importing the package's modules (the fuzz runner does) runs nothing
    run()
