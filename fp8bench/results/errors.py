"""The error a store gives when it cannot be opened or read, apart from the store itself.

The command line catches it around every verb; keeping it here lets the command line do so without importing the
store's database and DataFrame libraries (SQLAlchemy and pandas take about a third of a second to import).
"""


class StoreError(RuntimeError):
    """A store that cannot be opened or read: bad URL, corrupt file, newer schema."""
