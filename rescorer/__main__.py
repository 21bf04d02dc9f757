"""``python -m rescorer``: the same as the ``rescorer`` command."""

from rescorer.cli.main import main

if __name__ == "__main__":  # pragma: no cover
    main()
