"""`python -m ninferc` = the `ninferc` command."""

from ninferc.cli import main

main()
