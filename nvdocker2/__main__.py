"""`python -m nvdocker2` runs the installer CLI."""

from nvdocker2.cli import main

if __name__ == "__main__":
    main()
