"""Real systems we compare with: Spark Structured Streaming, a persistent broker, a synchronous log."""
