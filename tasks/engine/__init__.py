"""Where the vLLM server is started, watched, scraped and stopped."""
