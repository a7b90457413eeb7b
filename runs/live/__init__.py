"""The live layer: websocket consumers and the wake-ups workers send them."""
