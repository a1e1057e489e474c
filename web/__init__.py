"""HTTP API and developer UI, served by every worker on Faust's aiohttp server."""
