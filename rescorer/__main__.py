"""``python -m rescorer``: the same as the ``rescorer`` command."""

from rescorer.cli.main import run

if __name__ == "__main__":  # pragma: no cover
    run()
