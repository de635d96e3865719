"""``python -m provider --port 8765 --db provider.sqlite``: serve the notification service."""

from provider.server import main

if __name__ == "__main__":
    main()
