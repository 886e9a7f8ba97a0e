"""Developer tooling behind `threadline schema` and `threadline docs`: the JSON Schemas and
the generated docs pages. The server never imports it; the CLI loads it on demand."""
