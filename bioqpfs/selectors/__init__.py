"""One module per selection method; each returns a :class:`bioqpfs.Selection`."""
