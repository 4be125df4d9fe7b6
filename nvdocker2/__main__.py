"""`python -m nvdocker2` runs the installer CLI (through the console script's entry)."""

from nvdocker2.console import main

if __name__ == "__main__":
    main()
