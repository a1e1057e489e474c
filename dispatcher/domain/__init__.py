"""Pure domain logic: no faust, aiohttp or rocksdict imports, no wall-clock reads."""
