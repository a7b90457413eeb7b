"""What the built-in agents call: tools (effects the engine logs and replays) and pure helpers.

- ``http``      one httpx client per process; transient vs permanent HTTP errors
- ``crawl``     fetch_page, site_generation; page parsing; the crawl's bookkeeping
- ``dataset``   read_rows, write_batch, read_back, notify; checksums
- ``llm``       chat_completion against any OpenAI-compatible API
- ``research``  search_pages, calculator, write_note (the assistant's tools)
"""
