"""kiln's in-sandbox runtime: the Python side of docs/protocol.md."""
