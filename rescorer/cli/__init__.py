"""The ``rescorer`` command line (entry point :func:`rescorer.cli.main.main`).

One module per command group, :mod:`rescorer.cli.options` for what they share; thin click
commands over the library.
"""
