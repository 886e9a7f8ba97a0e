"""Mail between threads: addresses, a Maildir transport, and the tools and methods that use it."""
