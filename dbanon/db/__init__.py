"""Database access: connections, the embedded server, catalog, COPY streaming."""
