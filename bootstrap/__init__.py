"""The composition root: importable by ``api`` and ``workers``, importing neither."""
